"""Per-call profile of a compiled model: every fusion group's kernel is timed and named with its schedule source."""

from __future__ import annotations

from onnx_graphs import mlp

from autosched.db import MemoryDatabase
from autosched.deploy.build import DEFAULT, compile_model
from autosched.deploy.profiling import profile
from autosched.graph.frontends import load_model


def test_profile_times_every_fusion_group_and_the_whole_call(cpu_target):
    model = load_model(mlp(batch=4))
    compiled = compile_model(model, cpu_target, MemoryDatabase())
    prof = profile(compiled, model.random_inputs(0), runs=3)
    kernels = {c.name.removesuffix("_prepacked"): c for c in prof.calls if c.source not in ("vm", "")}
    assert set(kernels) == set(compiled.sources), (kernels, compiled.sources)
    assert all(c.source == DEFAULT and c.calls == 1 and c.ms > 0 for c in kernels.values())
    assert [c.ms for c in prof.calls] == sorted((c.ms for c in prof.calls), reverse=True)
    assert 0 < prof.kernels_ms and prof.whole_ms > 0
    table = prof.table(top=2)
    slowest = next(c for c in prof.calls if c.source != "vm")
    assert slowest.name[:48] in table and "whole call" in table and "vm.builtin" not in table
