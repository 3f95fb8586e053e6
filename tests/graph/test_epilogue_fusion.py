"""Fused epilogues: the bias, activation and residual after a matmul or conv are computed in its loop nest,
tile by tile right after the store, in every design of the space and so in every candidate tuned."""

from __future__ import annotations

import random

import pytest
from onnx_graphs import conv_bn_relu, ffn_block

from autosched.graph.frontends import load_model
from autosched.graph.passes import extract_tasks, rewrite
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace, most_fused

pytest.importorskip("onnx")


def _loops(sch, block) -> set:
    return {sch.get(loop) for loop in sch.get_loops(block)}


def _epilogue_shares_the_main_loops(sch) -> bool:
    """The last block (the group's output: the epilogue) sits inside loops of the reduction block."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    names = [sch.get(b).name_hint for b in blocks]
    reduction = next(b for b in blocks if any(int(v.iter_type) == 2 for v in sch.get(b).iter_vars))
    epilogue = blocks[-1]
    assert sch.get(epilogue).name_hint != sch.get(reduction).name_hint, names
    return bool(_loops(sch, reduction) & _loops(sch, epilogue))


@pytest.mark.parametrize("build,kind", [(ffn_block, "matmul"), (lambda: conv_bn_relu()[0], "conv2d")])
def test_every_design_and_candidate_computes_the_epilogue_in_the_producers_loop_nest(build, kind, cpu_target):
    model = load_model(build())
    tasks = [t for t in extract_tasks(rewrite(model.mod, cpu_target), cpu_target, settings_for(cpu_target).version)
             if kind in t.name]
    assert tasks and all("add" in t.name for t in tasks)  # bias (and residual) in the same group
    for task in tasks:
        space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target), seed=0)
        assert all(any(i.kind.name == "ReverseComputeAt" for i in d.insts) for d in space.designs), task.name
        rng = random.Random(0)
        for design in range(len(space.designs)):
            for _ in range(3):
                sch = _apply_random(space, design, rng)
                assert sch is None or _epilogue_shares_the_main_loops(sch), (task.name, design)


def _apply_random(space, design: int, rng: random.Random):
    """A random candidate of ``design`` (None where the postprocessors reject it)."""
    from autosched.errors import InvalidConfig

    params = {"design": design}
    for name, dist in space.knobs(design).items():
        if name == "design":
            continue
        params[name] = rng.choice(dist.choices) if hasattr(dist, "choices") else rng.randint(dist.low, dist.high)
    try:
        return space.apply(params)
    except (InvalidConfig, RuntimeError, ValueError):
        return None


def test_designs_without_a_fused_epilogue_are_dropped_only_where_a_fused_one_exists():
    class Inst:
        def __init__(self, name, inputs=(), outputs=()):
            self.kind = type("Kind", (), {"name": name})
            self.inputs, self.outputs = list(inputs), list(outputs)

    class Design:
        def __init__(self, *insts):
            self.insts = list(insts)

    plain = Design(Inst("Split"))
    fused = Design(Inst("GetConsumers", outputs=["c"]), Inst("ReverseComputeAt", inputs=["c"]))
    cached = Design(Inst("CacheWrite", outputs=["w"]), Inst("ReverseComputeAt", inputs=["w"]))  # not an epilogue
    assert most_fused([plain, fused, cached]) == [fused]
    assert most_fused([plain, cached]) == [plain, cached]
    assert most_fused([plain]) == [plain]
