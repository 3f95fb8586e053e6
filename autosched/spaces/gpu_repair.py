"""A GPU setting repaired into the target's limits: threads per block, virtual threads, shared memory.

Uniformly sampled tile sizes of a large GPU kernel pass VerifyGPUCode under 1 % of the time; ``repair_gpu_setting``
steps a rejected setting to a legal one nearby (``TraceSearchSpace.repair``).
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

from autosched.errors import InvalidConfig
from autosched.spaces.knobs import tile_level
from autosched.spaces.tiling import divisors

MIN_THREADS = 32  # a GPU block's threads (MetaSchedule's thread_extent_low_inclusive)
MAX_VTHREADS = 8  # VerifyGPUCode's max_vthread


def repair_gpu_setting(space: Any, params: dict[str, Any], seed: int = 0, max_steps: int = 200,
                       max_applies: int = 10) -> tuple[dict[str, Any], Any] | None:
    """On a GPU, a legal setting near ``params`` (which VerifyGPUCode or a check rejected) and its schedule,
    or None.

    Uniform knob settings of a large GPU kernel pass under 1% of the time (4096^3 matmul on sm_90: 2 of 400):
    the threads of a block must number 32..max_threads_per_block, its virtual threads at most 8, its shared
    memory fit. A search left with nothing to measure stops. Threads and virtual threads are products of
    tile factors at the levels bound to them (read off the design's Bind instructions) and are cheap to
    decode: their knobs are stepped into range first; then the schedule is built, and while it is rejected
    (shared memory, mostly) the largest tile levels shrink, more after each rejection, every other level
    pinned so that what is freed goes to the block level. ``space``: a ``TraceSearchSpace``."""
    design = int(params.get("design", 0))
    bound = bound_knobs(space, design)
    threads, vthreads = bound.get("threadIdx", []), bound.get("vthread", [])
    tiles = {k.name: k for knobs in space.tile_knobs(design).values() for k in knobs}
    high = int(space.target.attrs.get("max_threads_per_block", 1024))
    per_thread = warp_size(space, design)  # threads per bound unit: a warp in a tensor-core design, else 1
    rng, out, applies = random.Random(seed), dict(params), 0

    def factors(names: list[str]) -> dict[str, int]:
        _, decisions = space.decisions(out)
        return {n: int(decisions[tiles[n].inst][tile_level(n)]) for n in names}

    def shrink(names: list[str]) -> bool:
        """The level with the largest factor among ``names`` gets the next smaller divisor."""
        now = {n: f for n, f in factors(names).items() if f > 1}
        if not now:
            return False
        for other, f in factors(list(tiles)).items():  # pinned: what is freed goes to the block level
            out[other] = divisors(tiles[other].extent).index(f)
        name = max(now, key=lambda n: (now[n], rng.random()))
        out[name] = max(divisors(tiles[name].extent).index(now[name]) - 1, 0)
        return True

    for _ in range(max_steps):
        n_threads = per_thread * math.prod(factors(threads).values())
        if math.prod(factors(vthreads).values()) > MAX_VTHREADS:
            moved = shrink(vthreads)
        elif n_threads > high:
            moved = shrink(threads)
        elif n_threads < MIN_THREADS:
            grow = [n for n in threads if int(out[n]) < tiles[n].distribution.high]
            if grow and rng.random() < 0.5:
                name = rng.choice(grow)
                out[name] = int(out[name]) + 1
                moved = True
            else:  # the inner levels hold the extent a thread level needs
                moved = shrink([n for n in tiles if n not in threads and n not in vthreads])
        else:
            try:
                return out, space.apply(out)
            except InvalidConfig:
                applies += 1
                if applies >= max_applies:
                    return None
            if applies == 1 and narrow_vector_loads(space, design, out):
                continue  # 16-element loads of a 16-bit type: 32 bytes, over VerifyGPUCode's 16
            # shared memory or registers: the largest tile levels, more of them after each rejection
            moved = all([shrink(list(tiles)) for _ in range(applies)])
        if not moved:
            return None
    return None

VECTOR_LOAD_CHOICES = frozenset({1, 2, 3, 4, 8, 16})  # MetaSchedule's vector_load_lens: cooperative fetches
MAX_VECTOR_LOAD = 8  # elements: 16 bytes of a 16-bit type, VerifyGPUCode's max_vector_bytes


def is_vector_load(knob: Any) -> bool:
    """A categorical knob choosing how many elements each thread of a cooperative fetch loads at once."""
    return bool(knob.choices) and set(knob.choices) <= VECTOR_LOAD_CHOICES


def narrow_vector_loads(space: Any, design: int, params: dict[str, Any]) -> bool:
    """Cooperative fetches of more than ``MAX_VECTOR_LOAD`` elements in ``params`` narrowed to it; whether any was.
    TVM offers bfloat16 fetches of 16 elements (it drops them for float16): a third of uniform bfloat16 matmul
    settings were rejected for it, whatever their tiles."""
    changed = False
    for knob in space.categorical_knobs(design):
        if is_vector_load(knob) and knob.choices[int(params[knob.name])] > MAX_VECTOR_LOAD:
            params[knob.name] = knob.choices.index(max(c for c in knob.choices if c <= MAX_VECTOR_LOAD))
            changed = True
    return changed


def warp_size(space: Any, design: int) -> int:
    """Threads per unit of the design's bound thread tiles: the target's warp size where the design runs a warp per
    unit (a tensor-core design, annotated ``warp_execution``: threadIdx.x is the warp's 32 lanes, implicit), else 1.
    Counting those units as threads made every repaired tensor-core block 32x too large (42-61 % of fp16 matmul
    settings legal after repair on sm_80/sm_90)."""
    warps = any(inst.kind.name == "Annotate" and "warp_execution" in str(inst.attrs)
                for inst in space.designs[design].insts)
    return int(space.target.attrs.get("thread_warp_size", 32)) if warps else 1


@functools.lru_cache(maxsize=64)  # one entry per (space, design); spaces live as long as a task
def bound_knobs(space: Any, design: int) -> dict[str, list[str]]:
    """Thread-axis kind (``threadIdx``, ``vthread``, ``blockIdx``) -> the tile knobs whose factors multiply
    into its extent, from the design's Split, Fuse and Bind instructions."""
    knob_of = {}  # (sampling instruction, level) -> knob name
    for k in (k for knobs in space.tile_knobs(design).values() for k in knobs):
        knob_of[(k.inst, tile_level(k.name))] = k.name
    factor_of, loops_of = {}, {}  # tile variable -> (instruction, level); loop -> knob names
    out: dict[str, list[str]] = {}
    for inst in space.designs[design].insts:
        kind = inst.kind.name
        if kind == "SamplePerfectTile":
            for level, var in enumerate(inst.outputs):
                factor_of[var] = (inst, level)
        elif kind == "Split":
            for loop, var in zip(inst.outputs, inst.inputs[1:], strict=False):
                name = knob_of.get(factor_of.get(var))
                loops_of[loop] = [name] if name else []
        elif kind == "Fuse":
            loops_of[inst.outputs[0]] = [n for loop in inst.inputs for n in loops_of.get(loop, [])]
        elif kind == "Bind":
            axis = str(inst.attrs[0]).split(".")[0]
            out.setdefault(axis, []).extend(loops_of.get(inst.inputs[0], []))
    return out
