"""A design's knobs, one per sampling decision of its trace, and the view of a space that rule-based settings
(``spaces/microkernel.py``) read them through, so that those need not import the space itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from optuna.distributions import BaseDistribution

from autosched._tvm import IRModule, Trace
from autosched.spaces.tiling import divisors


@dataclass
class Knob:
    name: str
    inst: Any  # the sampling Instruction in the design trace
    kind: str
    distribution: BaseDistribution
    extent: int = 0
    n_levels: int = 0
    max_innermost: int = 0
    choices: tuple = ()  # a categorical's candidates (e.g. unroll depths)


def tile_level(knob_name: str) -> int:
    """The tile level of a tile knob (``d0.1.tile2`` -> 2)."""
    return int(knob_name.rsplit("tile", 1)[1])


def with_tiles(params: dict[str, Any], tiles: dict[Any, list[Knob]], factors: dict[Any, list[int]]
               ) -> dict[str, Any]:
    """``params`` with every tile knob of ``tiles`` (sampling instruction -> its knobs) set to its level's factor in
    ``factors`` (sampling instruction -> the factors of levels 1..n-1; level 0 takes the rest)."""
    for inst, knobs in tiles.items():
        for knob in knobs:
            params[knob.name] = divisors(knob.extent).index(factors[inst][tile_level(knob.name) - 1])
    return params


class TiledSpace(Protocol):
    """A space of design traces whose knobs are ``Knob``s (``TraceSearchSpace``)."""

    mod: IRModule
    designs: list[Trace]

    def tile_knobs(self, design: int) -> dict[Any, list[Knob]]:
        """The design's tilings: sampling instruction -> its knobs (levels 1..n-1), in trace order."""

    def categorical_knobs(self, design: int) -> list[Knob]: ...

    def default_params(self, design: int = 0) -> dict[str, Any]: ...
