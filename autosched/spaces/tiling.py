"""Perfect tilings of a loop extent: the divisors a tile knob indexes, decoded and refitted."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def decode_tile(extent: int, n_levels: int, max_innermost: int, indices: list[int]) -> tuple[int, ...]:
    """Knob indices (levels 1..n-1, ordinal in the divisors of ``extent``) -> a perfect tiling of ``extent``.

    Decoded innermost first; each level is snapped down to a divisor of what is left, the outermost level
    takes the rest. Every input is legal and a larger index never gives a smaller tile.
    """
    divs, left, factors = divisors(extent), extent, []
    for level in range(n_levels - 1, 0, -1):
        want = divs[min(indices[level - 1], len(divs) - 1)]
        if level == n_levels - 1:
            want = min(want, max_innermost)
        factor = max(d for d in divisors(left) if d <= want)
        factors.append(factor)
        left //= factor
    return (left, *reversed(factors))


def refit_tile(factors: list[int], extent: int) -> tuple[int, ...]:
    """A perfect tiling of ``extent`` close to ``factors`` (a tiling of another extent): from the innermost level
    out, each level keeps the largest divisor of what is left no larger than its old factor (register and
    vector tiles survive where they divide), and the outermost level takes the rest."""
    left, inner = extent, []
    for factor in reversed(factors[1:]):
        kept = max(d for d in divisors(left) if d <= max(int(factor), 1))
        inner.append(kept)
        left //= kept
    return (left, *reversed(inner))
