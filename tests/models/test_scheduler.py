"""The task scheduler: warm-up round for every task, budget respected, improving tasks get the rounds."""

from __future__ import annotations

from autosched.models.scheduler import TaskScheduler, TaskState
from autosched.tasks import Task


def _state(name: str, weight: int, untuned_s: float) -> TaskState:
    return TaskState(Task(name, None, None, 1, 1e6, weight), untuned_s)


def _drive(scheduler: TaskScheduler, improve: dict[str, float], exhausted_after: dict[str, int] | None = None):
    """Run rounds; a task's best latency is multiplied by ``improve[name]`` each round it gets."""
    order = []
    while (s := scheduler.next_task()) is not None:
        n = s.n_trials + scheduler.round_size(s)
        cap = (exhausted_after or {}).get(s.task.name)
        if cap is not None:
            n = min(n, cap)
        scheduler.update(s, n, s.estimate_s * improve[s.task.name], exhausted=cap is not None and n >= cap)
        order.append(s.task.name)
    return order


def test_every_task_gets_a_warm_up_round_heaviest_first():
    states = [_state("small", 1, 1e-3), _state("big", 4, 1e-3), _state("mid", 1, 3e-3)]
    order = _drive(TaskScheduler(states, total_trials=24, round_trials=8), {"small": 0.9, "big": 0.9, "mid": 0.9})
    assert order == ["big", "mid", "small"]


def test_budget_is_spent_exactly_and_improving_tasks_get_more():
    states = [_state("improving", 1, 1e-2), _state("flat", 1, 1e-2)]
    scheduler = TaskScheduler(states, total_trials=160, round_trials=8)
    _drive(scheduler, {"improving": 0.7, "flat": 1.0})
    assert scheduler.trials_done == 160
    by_name = {s.task.name: s for s in states}
    assert by_name["improving"].n_trials > 2 * by_name["flat"].n_trials
    assert scheduler.estimated_latency_s == by_name["improving"].estimate_s + by_name["flat"].estimate_s


def test_exhausted_tasks_leave_the_rotation_and_their_budget_goes_to_others():
    states = [_state("one_point", 5, 1e-3), _state("open", 1, 1e-3)]
    scheduler = TaskScheduler(states, total_trials=64, round_trials=8)
    order = _drive(scheduler, {"one_point": 1.0, "open": 0.95}, exhausted_after={"one_point": 1})
    assert order.count("one_point") == 1
    assert states[1].n_trials == 63 and scheduler.trials_done == 64


def test_weight_scales_the_objective():
    states = [_state("a", 3, 2e-3), _state("b", 1, 1e-3)]
    assert TaskScheduler(states, 16).estimated_latency_s == 3 * 2e-3 + 1e-3
