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

    def close(self) -> None:
        """Release worker processes."""
