"""The task scheduler: warm-up round for every task, budget respected, improving tasks get the rounds."""

from __future__ import annotations

import pytest

from autosched.scheduler.task_scheduler import INF, TaskScheduler, TaskState, mark_cheap
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
    assert by_name["improving"].n_trials > by_name["flat"].n_trials
    assert scheduler.estimated_latency_s == by_name["improving"].estimate_s + by_name["flat"].estimate_s
    # the forward bound falls faster with a steeper decay: then the flat task gets fewer still
    states = [_state("improving", 1, 1e-2), _state("flat", 1, 1e-2)]
    _drive(TaskScheduler(states, total_trials=160, round_trials=8, stale_decay=0.5), {"improving": 0.7, "flat": 1.0})
    assert states[0].n_trials > 2 * states[1].n_trials


def test_a_heavy_task_whose_search_stalls_a_few_rounds_is_not_left_for_good():
    """The heavy task's first round cuts it to 0.6x, the next four find nothing, then each round cuts 0.8x (as
    MobileNetV2's heaviest convolution did); the light one improves 3 % a round. Decaying the forward bound by 0.5
    a stale round leaves the heavy task after its fourth round; the default keeps it in the rotation."""
    def run(stale_decay: float) -> tuple[TaskScheduler, TaskState]:
        heavy, light = _state("heavy", 1, 4e-3), _state("light", 4, 1e-3)
        scheduler = TaskScheduler([heavy, light], total_trials=240, round_trials=8, stale_decay=stale_decay)
        rounds = {"heavy": 0, "light": 0}
        while (s := scheduler.next_task()) is not None:
            r = rounds[s.task.name]
            rounds[s.task.name] += 1
            cut = (0.6 if r == 0 else 1.0 if r < 5 else 0.8) if s is heavy else 0.97
            scheduler.update(s, s.n_trials + scheduler.round_size(s), s.estimate_s * cut, exhausted=False)
        return scheduler, heavy

    halving, heavy_halving = run(0.5)
    default, heavy_default = run(TaskScheduler([], None).stale_decay)
    assert heavy_halving.n_trials <= 5 * 8 < heavy_default.n_trials
    assert default.estimated_latency_s < 0.9 * halving.estimated_latency_s


def test_exhausted_tasks_leave_the_rotation_and_their_budget_goes_to_others():
    states = [_state("one_point", 5, 1e-3), _state("open", 1, 1e-3)]
    scheduler = TaskScheduler(states, total_trials=64, round_trials=8)
    order = _drive(scheduler, {"one_point": 1.0, "open": 0.95}, exhausted_after={"one_point": 1})
    assert order.count("one_point") == 1
    assert states[1].n_trials == 63 and scheduler.trials_done == 64


def test_weight_scales_the_objective():
    states = [_state("a", 3, 2e-3), _state("b", 1, 1e-3)]
    assert TaskScheduler(states, 16).estimated_latency_s == 3 * 2e-3 + 1e-3


# --- cheap tasks and time budgets --------------------------------------------------------------------------
def _task(name: str, pattern: str, flops: float = 1e6, weight: int = 1) -> Task:
    return Task(name, None, None, 1, flops, weight, info={"pattern": pattern})


def test_cheap_means_a_cheap_pattern_among_the_smallest_under_the_share_threshold():
    states = [TaskState(_task("conv", "out-elementwise-fusable"), 50e-3),
              TaskState(_task("gelu", "elementwise"), 45e-3),  # half the model's time: searched
              TaskState(_task("bias_add", "broadcast"), 0.4e-3),  # 0.4 %: default schedule
              TaskState(_task("reshape", "injective", weight=3), 0.3e-3),  # 3 calls: 0.9 %, 1.5 % with the others
              TaskState(_task("tiny_mean", "reduction", flops=1e4), 0.2e-3),
              TaskState(_task("big_sum", "reduction", flops=1e8), 0.2e-3),  # not tiny: searched
              TaskState(_task("small_dense", "out-elementwise-fusable"), 0.2e-3),  # not a cheap pattern
              TaskState(_task("failed", "elementwise"), float("inf"))]  # baseline failed: searched
    mark_cheap(states, max_share=0.01)
    assert [s.task.name for s in states if s.cheap] == ["bias_add", "tiny_mean"]
    mark_cheap(states, max_share=0.02)
    assert [s.task.name for s in states if s.cheap] == ["bias_add", "reshape", "tiny_mean"]
    mark_cheap(states, max_share=0.0)
    assert not any(s.cheap for s in states)


def test_twenty_small_glue_tasks_are_not_all_left_on_defaults():
    # each 0.9 % of the model: one at a time each was under 1 %, together they are 18 % and escaped the search
    glue = [TaskState(_task(f"reshape{i}", "injective"), 0.9e-3) for i in range(20)]
    states = [TaskState(_task("conv", "out-elementwise-fusable"), 100e-3 - 18e-3), *glue]
    mark_cheap(states, max_share=0.01)
    assert [s.cheap for s in glue] == [True] + [False] * 19  # two would make 1.8 %
    total = sum(s.contribution_s for s in states)
    assert sum(s.contribution_s for s in states if s.cheap) < 0.01 * total


def test_the_share_is_of_the_estimate_with_the_measured_defaults():
    # 0.5 % of the untuned latency, but the convolution's default schedule ran 10x faster: 5 % of the estimate
    conv, glue = TaskState(_task("conv", "out-elementwise-fusable"), 199e-3), TaskState(_task("add", "broadcast"), 1e-3)
    mark_cheap([conv, glue], max_share=0.01)
    assert glue.cheap
    conv.best_s = 19e-3
    mark_cheap([conv, glue], max_share=0.01)
    assert not glue.cheap


def test_cheap_tasks_get_no_rounds():
    states = [_state("dense", 1, 1e-3), _state("add", 1, 1e-5)]
    states[1].cheap = True
    order = _drive(TaskScheduler(states, total_trials=40, round_trials=8), {"dense": 0.9, "add": 0.5})
    assert order == ["dense"] * 5 and states[1].n_trials == 0


def test_a_round_only_starts_if_it_is_expected_to_end_in_time_and_the_last_one_is_shortened():
    heavy, light = _state("heavy", 10, 1e-3), _state("light", 1, 1e-3)
    scheduler = TaskScheduler([heavy, light], total_trials=None, round_trials=8)
    scheduler.update(heavy, 8, 0.9e-3, exhausted=False, round_s=8.0, n_new=8)  # 1 s per trial
    scheduler.update(light, 8, 0.9e-3, exhausted=False, round_s=0.8, n_new=8)  # 0.1 s per trial
    assert scheduler.next_task(time_left_s=100.0) is heavy and scheduler.round_size(heavy, 100.0) == 8
    assert scheduler.next_task(time_left_s=3.5) is heavy and scheduler.round_size(heavy, 3.5) == 3
    assert scheduler.next_task(time_left_s=0.5) is light and scheduler.round_size(light, 0.5) == 5
    assert scheduler.next_task(time_left_s=0.05) is None
    fresh = _state("fresh", 1, 1e-3)  # no round of its own yet: the mean of all rounds (0.55 s per trial)
    assert TaskScheduler([heavy, light, fresh], None).round_size(fresh, 2.0) == 3
    before_any_round = [_state(n, 1, 1e-3) for n in "abc"]  # then: the median baseline measurement (1 s)
    for s, baseline_s in zip(before_any_round, (9.0, 1.0, 0.5), strict=True):
        s.baseline_s = baseline_s
    assert TaskScheduler(before_any_round, None).round_size(before_any_round[0], 5.5) == 5
    assert TaskScheduler(before_any_round, None).next_task(0.9) is None


def test_with_a_time_limit_tasks_above_a_share_warm_up_first_and_lighter_ones_wait():
    contributions = {"t0": 40e-3, "t1": 25e-3, "t2": 2e-3, "t3": 0.5e-3}  # latency per task, weight 1
    improve = dict.fromkeys(contributions, 0.8)
    timed = TaskScheduler([_state(n, 1, c) for n, c in contributions.items()], None, round_trials=8)
    assert timed.warmup_share == 0.02  # t2 is 3 % of the estimate, t3 0.7 %
    order = []
    while len(order) < 6 and (s := timed.next_task(time_left_s=1e3)) is not None:
        timed.update(s, s.n_trials + 8, s.estimate_s * improve[s.task.name], exhausted=False)
        order.append(s.task.name)
    assert order == ["t0", "t1", "t2", "t0", "t1", "t0"]  # t3 waits for the time that is left
    no_floor = TaskScheduler([_state(n, 1, c) for n, c in contributions.items()], None, warmup_share=1.0)
    order = []
    while len(order) < 4 and (s := no_floor.next_task(time_left_s=1e3)) is not None:
        no_floor.update(s, s.n_trials + 8, s.estimate_s * improve[s.task.name], exhausted=False)
        order.append(s.task.name)
    assert order == ["t0", "t1", "t0", "t1"]  # by expected gain alone: second rounds before t2's first
    untimed = TaskScheduler([_state(n, 1, c) for n, c in contributions.items()], 48, round_trials=8)
    assert _drive(untimed, improve)[:4] == ["t0", "t1", "t2", "t3"]  # no time limit: everyone warms up first


def test_no_round_once_the_time_is_up_even_with_no_timing_to_go_by():
    """A resumed run (every baseline in the database) has no seconds per trial yet: a round still fits any time left,
    but none once the time is up (before, such a run looped on rounds that ended at once, out of time)."""
    states = [_state("a", 1, 4e-3), _state("b", 1, 2e-3)]
    scheduler = TaskScheduler(states, None, round_trials=8)
    assert scheduler.s_per_trial(states[0]) == 0.0
    assert scheduler.round_size(states[0], 1e-3) == 8 and scheduler.next_task(time_left_s=1e-3) is states[0]
    assert scheduler.round_size(states[0], 0.0) == 0 and scheduler.round_size(states[0], -1.0) == 0
    assert scheduler.next_task(time_left_s=0.0) is None and scheduler.next_task(time_left_s=-1.0) is None


def test_a_first_rounds_cut_from_the_untuned_build_does_not_buy_a_second_round_before_fresh_tasks():
    """ResNet-50 at 5 minutes: convolutions cut 100x by their first round (170 ms -> 1.5 ms) took second rounds
    while a 39 ms convolution never got a first one."""
    states = [_state("cut_100x", 1, 170e-3), _state("fresh", 1, 39e-3)]
    scheduler = TaskScheduler(states, None, round_trials=8)
    first = scheduler.next_task(time_left_s=1e3)
    assert first.task.name == "cut_100x"
    scheduler.update(first, 9, 1.5e-3, exhausted=False, round_s=9.0, n_new=8)
    assert scheduler.next_task(time_left_s=1e3).task.name == "fresh"


def test_a_task_whose_untuned_build_timed_out_is_searched_first_not_never():
    """GPT-2's LM head (10 GFLOPs): its untuned build ran past the run timeout, so nothing was measured; it
    used to count as 0 s and never got a round (300 ms of a 450 ms model on its default schedule)."""
    lm_head = TaskState(Task("lm_head", None, None, 1, 9.9e9, 1), INF)
    layers = [_state(f"layer{i}", 12, 3e-3) for i in range(3)]
    scheduler = TaskScheduler([*layers, lm_head], None, round_trials=8)
    assert scheduler.next_task(time_left_s=1e3) is lm_head
    assert scheduler.next_task() is lm_head  # also in the warm-up without a time limit
    assert scheduler.estimated_latency_s == pytest.approx(3 * 12 * 3e-3)  # estimates stay what was measured
