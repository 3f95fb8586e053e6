"""The task scheduler: shares one trial budget (and/or one time budget) across a model's tasks to minimise
end-to-end latency.

The objective is sum(weight x best latency). Like Ansor's gradient scheduler, each round goes to the task
whose next round is expected to cut the most from it: a mix of the last round's cut, as a fraction of what is
left (backward), and an optimistic bound that shrinks with the trials already spent and with each round that found
nothing better (forward, by ``stale_decay`` a round). Tasks that stop improving fall behind; tasks whose search
space is exhausted leave the rotation, and their budget goes to the others.

Which tasks are searched at all: of the tasks whose pattern is cheap (elementwise, broadcast, injective, a tiny
reduction), the smallest, while together they stay under ``cheap_share`` of the estimate, keep their default
schedule (``mark_cheap``): judged after the untuned baselines, and again once the default schedules are measured
(the heavy tasks' defaults cut the estimate, so the glue's share of it grows). A transformer's GELU is elementwise
but can be half the model's time: its share keeps it in the search.

Warm-up: without a time limit every searched task gets one round (largest contribution first) before any
task gets a second. With a time limit, every task of at least ``warmup_share`` of the estimate (its default
schedule already measured) gets one round before any task gets a second, heaviest first; the lighter ones
compete with the others, their expected gain being their whole contribution, and the time decides how far down
the list the search gets. (Without that floor, a five-minute run of a YOLO-style detector gave its heaviest
convolutions third and fourth rounds while most of the others, 7-17 GFLOPS on their defaults, got none.) A
round is only started if it is expected (from the seconds per trial of the rounds so far) to end before the time
runs out; the last one is shortened to fit.

Many workers, one database: each worker runs its own scheduler over the shared counts (``observe`` takes in what
the others measured), skips the tasks they hold (``busy``) and leaves the trials of their rounds in flight
(``reserved``) to them, so together they spend the budget one worker would.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from dataclasses import dataclass, field

from autosched.tasks import Task

INF = float("inf")
CHEAP_PATTERNS = frozenset({"elementwise", "broadcast", "injective"})
TINY_REDUCTION_FLOPS = 1e6  # a reduction under this many FLOPs per call is as cheap as an elementwise kernel
WARMUP_SHARE = 0.02  # with a time limit, tasks of at least this share of the estimate get a first round early
NAIVE_FLOPS_PER_S = 1e9  # an unscheduled loop nest on these CPUs: 1-3 GFLOPS (ResNet-50 convs, a GPT-2 LM head)


@dataclass
class TaskState:
    task: Task
    untuned_s: float  # the default build's latency (the estimate until something better is measured)
    best_s: float = INF
    n_trials: int = 0
    history: list[float] = field(default_factory=list)  # estimate after each round
    exhausted: bool = False
    cheap: bool = False  # kept on its default schedule: no search rounds (see ``mark_cheap``)
    round_s: float = 0.0  # seconds spent in this run's rounds
    n_round_trials: int = 0  # trials measured in this run's rounds
    baseline_s: float = 0.0  # seconds its baseline measurement took in this run (0: found in the database)

    def __post_init__(self) -> None:
        self.history = self.history or [self.estimate_s]

    @property
    def estimate_s(self) -> float:
        return min(self.best_s, self.untuned_s)

    @property
    def stale_rounds(self) -> int:
        """Rounds in a row (most recent first) that improved the estimate by less than 0.5 %."""
        n = 0
        for before, after in zip(reversed(self.history[:-1]), reversed(self.history[1:]), strict=True):
            if after < before * 0.995:
                break
            n += 1
        return n

    @property
    def contribution_s(self) -> float:
        """This task's share of one inference: calls per inference x latency (0 while nothing is measured)."""
        return self.task.weight * self.estimate_s if self.estimate_s < INF else 0.0

    @property
    def ranking_s(self) -> float:
        """The latency the scheduler ranks the task by: its estimate or, while nothing is measured (its untuned
        build failed or ran past the run timeout, as GPT-2's 10-GFLOP LM head does), its FLOPs at a naive loop
        nest's rate, so that it is searched first rather than never."""
        return self.estimate_s if self.estimate_s < INF else self.task.flops / NAIVE_FLOPS_PER_S


def is_cheap_pattern(task: Task) -> bool:
    """Elementwise, broadcast or injective, or a reduction of under ``TINY_REDUCTION_FLOPS``."""
    pattern = task.info.get("pattern")
    return pattern in CHEAP_PATTERNS or (pattern == "reduction" and task.flops < TINY_REDUCTION_FLOPS)


def mark_cheap(states: list[TaskState], max_share: float) -> None:
    """Mark the tasks to keep on their default schedule: of the cheap patterns, the smallest (weight x measured
    estimate: the untuned build, or the default schedule once it is measured) while their shares of the estimate,
    added up, stay under ``max_share``. One glue task at a time each looks too small to search; twenty reshapes
    of 0.9 % each are 18 % of a model together, and a cumulative bound keeps what the search never reaches
    under ``max_share`` however many there are. A task whose baseline failed is searched."""
    total = sum(s.contribution_s for s in states)
    eligible = [s for s in states if s.estimate_s < INF and is_cheap_pattern(s.task)]
    left = max_share * total
    for s in states:
        s.cheap = False
    for s in sorted(eligible, key=lambda s: s.contribution_s):  # stable: equal tasks in the model's order
        if s.contribution_s >= left:
            break
        s.cheap, left = True, left - s.contribution_s


class TaskScheduler:
    def __init__(self, states: list[TaskState], total_trials: int | None, round_trials: int = 8,
                 backward_weight: float = 0.5, stale_decay: float = 0.75, warmup_share: float = WARMUP_SHARE):
        """``total_trials``: measurements of all tasks together (earlier runs included); None = no limit.
        ``stale_decay``: the forward bound's factor for each round in a row that found nothing better. A heavy
        task's search often stalls for 3-4 rounds before it improves again (MobileNetV2's heaviest convolution at
        1 thread, one run: 691 us after 16 trials, 674 after 32, 547 after 40, 488 after 64, 424 after 96); at 0.5
        a round such a task could be left after a stall. Replayed on 26 recorded 10-minute runs of 6 models at 1
        and 2 threads (``bench/scheduler_replay.py``), 0.75 gave each set the same or a lower estimated latency
        than 0.5 (geomean 0.977x, ViT-B/16 0.92-0.96x); tuned for real, MobileNetV2 at 1 thread ran 0.91x; ViT-B/16 at 2
        threads ran 1.07-1.11x the old rule's, mostly search luck on its FFN matmuls, and with micro-kernel seeds
        (spaces/microkernel.py) 0.88x the old rule's run (one process, paired; README, "Micro-kernel seeds")."""
        self.states, self.total_trials, self.round_trials = states, total_trials, round_trials
        self.backward_weight, self.stale_decay, self.warmup_share = backward_weight, stale_decay, warmup_share
        self.reserved = 0  # trials of other workers' rounds in flight (claimed, not yet measured)

    @property
    def trials_done(self) -> int:
        return sum(s.n_trials for s in self.states)

    @property
    def trials_left(self) -> float:
        """Of the trial budget, less what other workers have reserved (inf: no limit)."""
        return INF if self.total_trials is None else self.total_trials - self.trials_done - self.reserved

    @property
    def estimated_latency_s(self) -> float:
        """Sum over tasks of weight x best latency so far (the kernels' share of one inference)."""
        return sum(s.contribution_s for s in self.states)

    def _fresh(self, s: TaskState) -> bool:
        """Not yet a round's worth of measurements (the baseline alone does not count as a round)."""
        return s.n_trials < self.round_trials

    def _expected_gain(self, s: TaskState) -> float:
        if self._fresh(s):  # no round yet: optimistic, its whole contribution
            return s.task.weight * s.ranking_s
        # forward: optimistic, shrinking with trials spent and with every round that found nothing
        forward = s.ranking_s / max(s.n_trials, 1) * self.round_trials * self.stale_decay ** s.stale_rounds
        # backward: the last round's cut, as a fraction, of what is left now. In absolute terms, a first round's
        # cut from the untuned build (170 ms -> 1.5 ms on a ResNet-50 convolution) bought second rounds while
        # heavier tasks waited for a first one.
        before, after = (s.history[-2], s.history[-1]) if len(s.history) >= 2 else (INF, INF)
        backward = (before - after) / before * after if 0 < before < INF else forward
        return s.task.weight * (self.backward_weight * backward + (1 - self.backward_weight) * forward)

    def s_per_trial(self, s: TaskState) -> float:
        """Seconds per trial of the task's rounds in this run, else of all rounds so far, else the median
        baseline measurement of this run (0 if none: nothing to go by)."""
        if s.n_round_trials:
            return s.round_s / s.n_round_trials
        n = sum(t.n_round_trials for t in self.states)
        if n:
            return sum(t.round_s for t in self.states) / n
        baselines = [t.baseline_s for t in self.states if t.baseline_s > 0]
        return statistics.median(baselines) if baselines else 0.0

    def next_task(self, time_left_s: float = INF, busy: Collection[str] = ()) -> TaskState | None:
        """The task to give the next round to, leaving out the keys in ``busy`` (held by other workers); None when
        the trial budget is spent, every space is exhausted, or no round is expected to end within ``time_left_s``."""
        open_states = [s for s in self.states if not (s.exhausted or s.cheap or (busy and s.task.key in busy))
                       and self.round_size(s, time_left_s)]
        if not open_states:
            return None
        fresh = [s for s in open_states if self._fresh(s)]
        if fresh and time_left_s == INF:  # warm-up: every task gets one round first, heaviest first
            return max(fresh, key=self._expected_gain)  # a fresh task's gain: its whole (ranking) contribution
        floor = self.warmup_share * sum(s.task.weight * s.ranking_s for s in self.states)
        heavy = [s for s in fresh if s.task.weight * s.ranking_s >= floor]
        return max(heavy or open_states, key=self._expected_gain)  # with a time limit: the heavy ones warm up

    def round_size(self, s: TaskState, time_left_s: float = INF) -> int:
        """A round's trials: what is left of the trial budget, and what is expected to end within ``time_left_s``
        at the task's seconds per trial (the last round before the deadline is shorter); none once the time is up,
        even with nothing to go by (a resumed run whose baselines were all in the database)."""
        if time_left_s <= 0:
            return 0
        per_trial = self.s_per_trial(s)
        fits = time_left_s / per_trial if per_trial > 0 else INF
        return int(max(min(self.round_trials, self.trials_left, fits), 0))

    def observe(self, s: TaskState, n_trials: int, best_s: float) -> None:
        """The task's counts in the database, where other workers may have measured it since."""
        if n_trials > s.n_trials or best_s < s.best_s:
            s.n_trials, s.best_s = max(n_trials, s.n_trials), min(best_s, s.best_s)
            s.history.append(s.estimate_s)

    def update(self, s: TaskState, n_trials: int, best_s: float, exhausted: bool, round_s: float = 0.0,
               n_new: int = 0) -> None:
        """The result of a round: ``n_new`` trials measured in ``round_s`` seconds."""
        s.n_trials, s.best_s, s.exhausted = n_trials, best_s, exhausted
        s.round_s, s.n_round_trials = s.round_s + round_s, s.n_round_trials + n_new
        s.history.append(s.estimate_s)
