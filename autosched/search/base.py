"""The SearchStrategy interface: propose candidates, learn from their results."""

from __future__ import annotations

import abc

from autosched.records import Candidate, MeasureResult


class SearchStrategy(abc.ABC):
    @abc.abstractmethod
    def ask(self, n: int) -> list[Candidate]:
        """Up to ``n`` new, buildable candidates (fewer, or none, once the space is exhausted)."""

    @abc.abstractmethod
    def tell(self, candidates: list[Candidate], results: list[MeasureResult]) -> None:
        """Results of candidates returned by ``ask``, in the same order."""

    def drain_rejected(self) -> list[Candidate]:
        """Candidates rejected before building since the last call (for the database). Default: none."""
        return []

    def abandon(self, candidates: list[Candidate]) -> None:
        """Candidates asked for but never measured (the run was interrupted)."""
