"""Re-apply stored schedules: a record's trace replayed on its task's PrimFunc."""

from __future__ import annotations

from autosched._tvm import IRModule, Schedule, Trace
from autosched.records import TuningRecord


def schedule_from_record(mod: IRModule, record: TuningRecord) -> Schedule:
    """Replay the record's full trace (postprocessors included) on a fresh schedule of ``mod``.

    A baseline record (the unscheduled default build, measured as a candidate) has no trace: ``mod`` as is."""
    sch = Schedule(mod, error_render_level="none")
    if record.trace_json is None:
        return sch
    Trace.apply_json_to_schedule(record.trace_json, sch)
    return sch
