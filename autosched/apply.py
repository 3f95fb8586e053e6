"""Re-apply stored schedules: a record's trace replayed on its task's PrimFunc."""

from __future__ import annotations

import json

from autosched._tvm import IRModule, Schedule, Target, Trace
from autosched.records import TuningRecord
from autosched.spaces.settings import settings_for


def schedule_from_record(mod: IRModule, record: TuningRecord) -> Schedule:
    """Replay the record's full trace (postprocessors included) on a fresh schedule of ``mod``, as the search
    space prepared it (the fast-math rewrite of ``search_spaces/*.toml``, for records of the current space
    version; older records replay on ``mod`` as it is).

    A baseline record (the unscheduled default build, measured as a candidate) has no trace: ``mod`` as is."""
    if record.trace_json is None:
        return Schedule(mod, error_render_level="none")
    settings = settings_for(Target(json.loads(record.target)))
    if record.space_version == settings.version:
        mod = settings.prepare(mod)
    sch = Schedule(mod, error_render_level="none")
    Trace.apply_json_to_schedule(record.trace_json, sch)
    return sch
