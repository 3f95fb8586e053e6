"""What a tuning run leaves behind, in miniature (shared by tests/deploy and tests/scheduler)."""

from __future__ import annotations

from autosched._tvm import as_python
from autosched.db import TaskRow
from autosched.graph.passes import extract_tasks, rewrite
from autosched.records import Candidate, MeasureResult, Status
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tune import to_record


def record_one_schedule_per_task(model, target, db, seed=1):
    """What a tuning run leaves behind, in miniature: one measured schedule (a real trace) per task."""
    tasks = extract_tasks(rewrite(model.mod, target), target, settings_for(target).version)
    for task in tasks:
        db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, "", task.flops, {}))
        space = TraceSearchSpace(task.mod, target, settings_for(target), seed=seed)
        sch = space.apply(space.default_params())
        cand = Candidate(task.key, {}, space.effective_decisions(sch),
                         as_python(sch.trace.as_json(remove_postproc=False)))
        db.commit([to_record(task, cand, MeasureResult(Status.OK, [1e-3]))])
    return tasks
