"""Re-apply stored schedules: a record's trace replayed on its task's PrimFunc."""

from __future__ import annotations

import json

from autosched._tvm import IRModule, Schedule, Target, Trace, load_tensor_intrins, s_tir
from autosched.records import TuningRecord
from autosched.spaces.dlight_design import dlight_rules
from autosched.spaces.settings import settings_for


def schedule_from_record(mod: IRModule, record: TuningRecord) -> Schedule:
    """Replay the record's full trace (postprocessors included) on a fresh schedule of ``mod``, as the search
    space prepared it (the fast-math rewrite of ``search_spaces/*.toml``, for records of the current space
    version; older records replay on ``mod`` as it is).

    A baseline record (the untuned default build, measured as a candidate) has no trace: ``untuned(mod)``."""
    target = Target(json.loads(record.target))
    if record.trace_json is None:
        return Schedule(untuned(mod, target), error_render_level="none")
    load_tensor_intrins(target)  # a tensorized trace names them (the bfloat16 wmma ones are ours)
    settings = settings_for(target)
    if record.space_version == settings.version:
        mod = settings.prepare(mod)
    sch = Schedule(mod, error_render_level="none")
    Trace.apply_json_to_schedule(record.trace_json, sch)
    return sch


def untuned(mod: IRModule, target: Target) -> IRModule:
    """TVM's default build of ``mod`` for ``target``, the untuned baseline: on a CPU, ``mod`` as it is; on a GPU,
    where code must have its loops bound to blocks and threads, a copy with dlight's rules applied to every
    PrimFunc not already scheduled (functions marked ``tirx.is_scheduled`` are left as they are)."""
    if target.kind.name == "llvm":
        return mod
    copy = IRModule(mod.functions, attrs=mod.attrs) if mod.attrs else IRModule(mod.functions)  # dlight: in place
    with target:
        return s_tir.dlight.ApplyDefaultSchedule(*dlight_rules())(copy)
