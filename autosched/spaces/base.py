"""The SearchSpace interface: knobs as Optuna distributions, params -> scheduled PrimFunc."""

from __future__ import annotations

import abc
from typing import Any

from optuna.distributions import BaseDistribution

from autosched._tvm import Schedule


class SearchSpace(abc.ABC):
    """Knobs of one task's schedules. ``design`` (if present) selects which other knobs are active."""

    version: int

    @abc.abstractmethod
    def knobs(self, design: int | None = None) -> dict[str, BaseDistribution]:
        """Knob distributions; with ``design`` only that design's knobs (without the ``design`` knob itself)."""

    @abc.abstractmethod
    def apply(self, params: dict[str, Any]) -> Schedule:
        """A postprocessed schedule for these knob values; raises InvalidConfig for an illegal combination."""

    def repair(self, params: dict[str, Any], seed: int = 0) -> tuple[dict[str, Any], Schedule] | None:
        """A legal setting near ``params``, which ``apply`` rejected, with the schedule ``apply`` built for it; or
        None (default: no repair)."""
        return None

    def size(self) -> int:
        """How many distinct knob settings there are (an upper bound on distinct schedules)."""
        return 1 << 62

    @abc.abstractmethod
    def effective_decisions(self, sch: Schedule) -> list[Any]:
        """What the schedule really used: two knob settings can give one schedule (the dedup key)."""
