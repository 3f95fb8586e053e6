"""The task scheduler: shares one trial budget across a model's tasks to minimise end-to-end latency.

The objective is sum(weight x best latency). Like Ansor's gradient scheduler, each round goes to the task
whose next round is expected to cut the most from it: a mix of the recent improvement (backward) and an
optimistic bound that shrinks with the trials already spent and halves with each round that found
nothing better (forward). Tasks that stop improving fall
behind; tasks whose search space is exhausted leave the rotation, and their budget goes to the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autosched.tasks import Task


@dataclass
class TaskState:
    task: Task
    untuned_s: float  # the default build's latency (the estimate until something better is measured)
    best_s: float = float("inf")
    n_trials: int = 0
    history: list[float] = field(default_factory=list)  # estimate after each round
    exhausted: bool = False

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
        """This task's share of one inference: calls per inference x latency."""
        return self.task.weight * self.estimate_s if self.estimate_s < float("inf") else 0.0


class TaskScheduler:
    def __init__(self, states: list[TaskState], total_trials: int, round_trials: int = 8, backward_weight: float = 0.5):
        self.states, self.total_trials, self.round_trials = states, total_trials, round_trials
        self.backward_weight = backward_weight

    @property
    def trials_done(self) -> int:
        return sum(s.n_trials for s in self.states)

    @property
    def estimated_latency_s(self) -> float:
        """Sum over tasks of weight x best latency so far (the kernels' share of one inference)."""
        return sum(s.contribution_s for s in self.states)

    def _expected_gain(self, s: TaskState) -> float:
        # forward: optimistic, shrinking with trials spent and halving with every round that found nothing
        forward = s.estimate_s / max(s.n_trials, 1) * self.round_trials * 0.5 ** s.stale_rounds
        backward = (s.history[-2] - s.history[-1]) if len(s.history) >= 2 else forward
        return s.task.weight * (self.backward_weight * backward + (1 - self.backward_weight) * forward)

    def next_task(self) -> TaskState | None:
        """The task to give the next round to, or None when the budget is spent or every space is exhausted."""
        if self.trials_done >= self.total_trials:
            return None
        open_states = [s for s in self.states if not s.exhausted]
        if not open_states:
            return None
        fresh = [s for s in open_states if s.n_trials == 0]  # warm-up: every task gets one round first
        if fresh:
            return max(fresh, key=lambda s: s.contribution_s)
        return max(open_states, key=self._expected_gain)

    def round_size(self, s: TaskState) -> int:
        return min(self.round_trials, self.total_trials - self.trials_done)

    def update(self, s: TaskState, n_trials: int, best_s: float, exhausted: bool) -> None:
        s.n_trials, s.best_s, s.exhausted = n_trials, best_s, exhausted
        s.history.append(s.estimate_s)
