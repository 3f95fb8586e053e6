"""The SearchStrategy interface: propose candidates, learn from their results."""

from __future__ import annotations

import abc
from typing import Any

from autosched.records import Candidate, MeasureResult


class SearchStrategy(abc.ABC):
    """What the tune loop and the task scheduler call. ``ask``/``tell`` are required; the seeding hooks
    (``space``, ``space_signature``, ``fitted``, ``propose``: other tasks' or CPUs' best schedules queued as first
    candidates, ``scheduler/search_seeds.py``) have defaults that take no seeds."""

    space: Any = None  # the search space (a TraceSearchSpace takes refitted schedules); None: no seeds
    space_signature: str | None = None  # equal for strategies whose points map through ``fitted``; None: none

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

    def fitted(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """Another space's point in this one, or None where it has none (the default: no point fits)."""
        return None

    def propose(self, params: dict[str, Any]) -> bool:
        """Queue this point to be measured next; returns whether it was queued (the default: never)."""
        return False
