"""One more CPU design, for functions too small to share among threads: the default design with its parallel loop
left serial (vectorised and unrolled as before).

Waking TVM's thread pool costs about a microsecond per call at 2 threads; a 512-wide gate of an LSTM step (a
sigmoid of a sum, vectorised) is a tenth of that on one core. A recurrent model runs a few such kernels per time
step, an EfficientNet or MobileNetV3 a few per squeeze-excitation block, so the launches add up. MetaSchedule's
rules always parallelise the outer loops (``meta_schedule.parallel`` on the root block), and nothing in the
rules' decisions turns that off; this design does. It is appended after the other designs, so the designs of
every stored record keep their index (no space version bump), and both it and the parallel default are
measured among a task's defaults, so the faster one is what compile uses.

A schedule's identity is its sampling decisions (``records.schedule_key``), and dropping the parallel loop
changes none of them, so the design ends with a marker: a categorical sample of one candidate, sampled by
nothing else, which tells its schedules from the parallel design's.
"""

from __future__ import annotations

from autosched._tvm import IRModule, Schedule, ScheduleError, Target, Trace

SERIAL_MAX_ITERATIONS = 32768  # a function whose blocks iterate more than this in all keeps only parallel designs
PARALLEL_ANNOTATION = "meta_schedule.parallel"
MARKER = 0  # the one candidate of the marker sample
MAX_VECTOR = 64  # the cpu.toml rules' max_vectorize_extent
SPATIAL = 0  # tirx.IterVar kind


def serial_design(mod: IRModule, target: Target, source: Trace) -> Trace | None:
    """``source`` without its parallel loops (the rules' annotation, or ``parallel`` on a loop), plus the marker;
    None on one thread, if ``mod`` iterates more than ``SERIAL_MAX_ITERATIONS`` times, if ``source`` has nothing
    parallel, or if a primitive refuses."""
    if int(target.attrs.get("num-cores", 1)) <= 1 or iterations(mod) > SERIAL_MAX_ITERATIONS:
        return None
    kept = [inst for inst in source.insts if not _is_parallel(inst)]
    if len(kept) == len(source.insts):
        return None
    decisions = {inst: source.decisions[inst] for inst in kept if inst in source.decisions}
    sch = Schedule(mod, error_render_level="none")
    try:
        Trace(kept, decisions).apply_to_schedule(sch, remove_postproc=True)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            _split_for_vectors(sch, block)
        sch.sample_categorical(candidates=[MARKER], probs=[1.0], decision=0)
    except (ScheduleError, RuntimeError):
        return None
    return sch.trace


def _split_for_vectors(sch: Schedule, block: object) -> None:
    """An elementwise block's loops, as lowered (one per iteration variable, none scheduled), fused and split to
    an inner loop of at most ``MAX_VECTOR`` elements: the postprocessor vectorises inner loops only up to that
    extent, and without a parallel loop nothing else splits them (a 512-wide loop would stay scalar)."""
    stmt, loops = sch.get(block), sch.get_loops(block)
    if not loops or len(loops) != len(stmt.iter_vars) or any(iv.iter_type != SPATIAL for iv in stmt.iter_vars):
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    extent = int(sch.get(fused).extent)
    lanes = max(d for d in range(1, min(extent, MAX_VECTOR) + 1) if extent % d == 0)
    if 1 < lanes < extent:
        sch.split(fused, [None, lanes])


def iterations(mod: IRModule) -> int:
    """The iterations of every block of ``mod``'s function, added up (each block's iteration-variable extents
    multiplied); a block with a symbolic extent counts as too many."""
    sch = Schedule(mod, error_render_level="none")
    total = 0
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        n = 1
        for iv in sch.get(block).iter_vars:
            if not hasattr(iv.dom.extent, "value"):
                return SERIAL_MAX_ITERATIONS + 1
            n *= int(iv.dom.extent.value)
        total += n
    return total


def _is_parallel(inst: object) -> bool:
    kind = inst.kind.name  # type: ignore[attr-defined]
    return kind == "Parallel" or (kind == "Annotate" and str(inst.attrs[0]) == PARALLEL_ANNOTATION)  # type: ignore[attr-defined]
