"""The blockwise design of a fused attention: the space's default for it, and schedules computing it right."""

from __future__ import annotations

import numpy as np
import pytest

from autosched._tvm import tvm
from autosched.graph.attention import attention_func, padded_keys, padded_queries
from autosched.spaces.attention import default_decisions
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target

TARGET = make_target("llvm", 2)


def _space(lead, n_q, n_k, depth, mask, scale=0.25, divide=False, guard=True) -> TraceSearchSpace:
    func = attention_func((*lead, n_q, depth), (*lead, depth, n_k), (*lead, n_k, depth), mask, scale, divide, guard)
    return TraceSearchSpace(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), TARGET,
                            settings_for(TARGET))


def _inputs(lead, n_q, n_k, depth, mask, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    q, kt, v = (rng.standard_normal(s).astype("float32") for s in ((*lead, n_q, depth), (*lead, depth, n_k),
                                                                   (*lead, n_k, depth)))
    if mask is None:
        return [q, kt, v]
    m = np.where(rng.random(mask) < 0.2, -np.inf, 0.0).astype("float32")
    m[..., 0] = 0.0  # every row keeps a key
    return [q, kt, m, v]


def _reference(arrays, scale, divide) -> np.ndarray:
    q, kt, *mask, v = (a.astype("float64") for a in arrays)
    logits = q @ kt / scale if divide else q @ kt * scale
    if mask:
        logits = logits + mask[0]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _run(sch, arrays, out_shape) -> np.ndarray:
    out = tvm.runtime.empty(out_shape, "float32", tvm.cpu())
    tvm.compile(sch.mod, target=TARGET).mod["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


# (lead, queries, keys, head dim, mask, scale, divide): Swin's windows (49 keys, a mask per window, windows x heads
# as batch), a speech encoder's 1500 keys, a key padding mask with head dim 8, head dim 128, ViT's 197 tokens (rows
# and keys padded) with a mask of its own per row
SHAPES = [((16, 3), 49, 49, 32, (16, 1, 49, 49), 0.125, False),
          ((1, 2), 60, 1500, 64, None, 8.0, True),
          ((1, 4), 64, 100, 8, (1, 1, 1, 100), 0.5, False),
          ((2,), 32, 256, 128, None, 0.088, False),
          ((1, 3), 197, 197, 64, (197, 197), 0.125, False)]


@pytest.mark.parametrize("lead,n_q,n_k,depth,mask,scale,divide", SHAPES)
def test_a_fused_attention_defaults_to_its_blockwise_design_and_computes_softmax_attention(
        lead, n_q, n_k, depth, mask, scale, divide):
    space = _space(lead, n_q, n_k, depth, mask, scale, divide)
    params, sch = space.default_schedule()
    design = space.design_index("attention")
    assert design is not None and params["design"] == design
    script = sch.mod.script()
    assert "T.parallel" in script and "T.vectorized" in script and 'scope="local"' in script
    assert "T.vectorized(1)" not in script  # every stage along whole vectors (the reductions' lanes found too)
    arrays = _inputs(lead, n_q, n_k, depth, mask)
    want = _reference(arrays, scale, divide)
    np.testing.assert_allclose(_run(sch, arrays, want.shape), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[2], SHAPES[4]])
def test_other_settings_of_the_knobs_stay_legal_and_compute_the_same(shape):
    lead, n_q, n_k, depth, mask, scale, divide = shape
    space = _space(lead, n_q, n_k, depth, mask, scale, divide)
    design = space.design_index("attention")
    knobs = space.knobs(design)
    assert len(knobs) >= 8  # pairs, rows per block and per register tile, lanes of every stage
    arrays = _inputs(lead, n_q, n_k, depth, mask, seed=1)
    want = _reference(arrays, scale, divide)
    rng = np.random.default_rng(0)
    for _ in range(4):
        params = {"design": design, **{name: int(rng.integers(d.low, d.high + 1)) for name, d in knobs.items()}}
        np.testing.assert_allclose(_run(space.apply(params), arrays, want.shape), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n_keys", [49, 1500, 4096])
def test_the_default_tiles_are_whole_vectors_and_register_tiles_that_fit(n_keys):
    tiles = default_decisions((64, n_keys, padded_keys(n_keys), 64, 64), 512)
    assert padded_keys(n_keys) % 16 == 0 and tiles.key_lanes % 16 == 0 and tiles.exp_lanes % 16 == 0
    assert tiles.value_lanes == 64 and n_keys % tiles.register_rows == 0 and tiles.register_rows >= 4
    assert tiles.register_rows * tiles.key_lanes // 16 <= 28  # accumulators in AVX-512's 32 registers
    assert tiles.block_rows % tiles.register_rows == 0 and n_keys % tiles.block_rows == 0


def test_rows_are_padded_only_where_no_register_tile_of_rows_divides_them():
    assert [padded_queries(n) for n in (1, 7, 49, 77, 1500, 197, 577)] == [1, 7, 49, 77, 1500, 200, 584]
    assert [padded_keys(n) for n in (16, 49, 1500, 4096)] == [16, 64, 1504, 4096]
