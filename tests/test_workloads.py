from __future__ import annotations

import numpy as np
import pytest

from autosched._tvm import arg_specs, cpu_device, tvm
from autosched.errors import UnknownNameError, UserInputError
from autosched.workloads import CATALOG, get_workload, parse_shape, reference_outputs

SMALL = {
    "matmul": (16, 24, 8), "batch_matmul": (2, 8, 8, 4), "dense": (4, 16, 8), "conv2d": (1, 4, 8, 8, 8, 3, 3),
    "depthwise_conv2d": (1, 4, 8, 8, 3, 3, 2, 1), "softmax": (4, 32), "layer_norm": (4, 32), "elementwise": (3, 4, 8),
    "gelu": (3, 40), "gelu_tanh": (3, 40), "bias_gelu": (3, 40),
}


def test_parse_shape_accepts_commas_and_x():
    assert parse_shape("512,512,512") == (512, 512, 512)
    assert parse_shape("1x3x224x224") == (1, 3, 224, 224)


@pytest.mark.parametrize("text", ["", "a,b", "512,,-1", "0,4", "1.5,2"])
def test_parse_shape_rejects_malformed(text):
    with pytest.raises(UserInputError, match="malformed shape"):
        parse_shape(text)


def test_unknown_operator_lists_the_catalog():
    with pytest.raises(UnknownNameError, match="matmul") as info:
        get_workload("matmull")
    assert set(info.value.valid) == set(CATALOG)


def test_wrong_number_of_dims_names_the_expected_shape():
    with pytest.raises(UserInputError, match="M,N,K"):
        get_workload("matmul").normalise((4, 4))


@pytest.mark.parametrize("op", sorted(CATALOG))
def test_untuned_build_matches_numpy_reference(op):
    wl = get_workload(op)
    shape = wl.normalise(SMALL[op])
    mod = wl.prim_func(shape)
    specs = arg_specs(mod["main"])
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(d) for s, d in specs[:-1]]
    dev = cpu_device()
    out = tvm.runtime.empty(specs[-1][0], "float32", dev)
    tvm.compile(mod, target="llvm").mod["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
    np.testing.assert_allclose(out.numpy(), reference_outputs(op, shape, inputs), rtol=1e-4, atol=1e-4)
    assert wl.flops(*shape) > 0
