"""Builder / Runner interfaces. Neither raises for a bad candidate: failures are results."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from autosched.records import BuildResult, Candidate, MeasureResult


@dataclass(frozen=True)
class TaskIO:
    """Where a task's reference inputs/outputs live for the runner (``in{i}``, ``out{i}`` in a .npz)."""

    io_path: str
    n_outputs: int


class Builder(abc.ABC):
    @abc.abstractmethod
    def build(self, candidates: list[Candidate], timeout_s: float | None = None) -> list[BuildResult]:
        """Build each candidate; ``timeout_s``: a limit other than the builder's own for these (a task's default
        schedule, built once and what compile falls back to, may take longer than a search allows)."""

    def close(self) -> None:
        """Release worker processes."""


class Runner(abc.ABC):
    @abc.abstractmethod
    def run(self, builds: list[BuildResult], io: TaskIO) -> list[MeasureResult]: ...

    def time_once_above(self, io: TaskIO, seconds: float) -> None:
        """The next candidate of ``io``'s task is timed by one warm run when its checking run takes over
        ``seconds`` (an untuned baseline: a slow build's latency only ranks the task and bounds its schedules, and
        one run of a 150 ms convolution says as much as three)."""
        self.__dict__.setdefault("_next_cutoff_s", {})[io.io_path] = seconds

    def _cutoff_s(self, io: TaskIO, best_s: float | None, ratio: float | None) -> float | None:
        """The cutoff of the next candidate of ``io``'s task: ``time_once_above``'s, else ``ratio`` x the best."""
        once = self.__dict__.get("_next_cutoff_s", {}).pop(io.io_path, None)
        return once if once is not None else best_s * ratio if best_s is not None and ratio else None

    def close(self) -> None:
        """Release worker processes."""
