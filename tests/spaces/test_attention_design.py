"""The blockwise design of a fused attention: the space's default for it, and a schedule computing it right."""

from __future__ import annotations

import numpy as np

from autosched._tvm import tvm
from autosched.graph.attention import attention_func
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target


def test_a_fused_attention_defaults_to_its_blockwise_design_and_computes_softmax_attention():
    lead, n, depth = (1, 2), 96, 16
    func = attention_func((*lead, n, depth), (*lead, depth, n), (*lead, n, depth), (1, 1, 1, n), 0.25, False, True)
    target = make_target("llvm", 2)
    space = TraceSearchSpace(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target,
                             settings_for(target))
    params, sch = space.default_schedule()
    assert space.design_index("attention") is not None and params["design"] == space.design_index("attention")
    assert len(space.knobs(space.design_index("attention"))) >= 5  # rows per block, register rows, vector widths
    script = sch.mod.script()
    assert "T.parallel" in script and "T.vectorized" in script
    rng = np.random.default_rng(0)
    q, kt, v = (rng.standard_normal(s).astype("float32") for s in ((*lead, n, depth), (*lead, depth, n),
                                                                   (*lead, n, depth)))
    mask = np.where(rng.random((1, 1, 1, n)) < 0.2, -np.inf, 0.0).astype("float32")
    mask[..., 0] = 0.0
    out = tvm.runtime.empty((*lead, n, depth), "float32", tvm.cpu())
    lib = tvm.compile(sch.mod, target=target)
    lib.mod["main"](*[tvm.runtime.tensor(a) for a in (q, kt, mask, v)], out)
    logits = q @ kt * 0.25 + mask
    p = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)
    for index in (0, 2):  # other settings of the knobs stay legal
        knobs = space.knobs(space.design_index("attention"))
        space.apply(dict(params, **{name: index for name in knobs if name != "design"}))
