"""A search space for any PrimFunc: MetaSchedule's design spaces with every sampling decision as a knob.

The rules in ``search_spaces/<family>.toml`` generate one or more design-space traces for the function
(e.g. an epilogue fused at different tile levels). Each trace's sampling instructions become ordinal Optuna
knobs; ``apply`` replays the chosen trace with the decoded decisions and runs the postprocessors, which
reject illegal candidates before anything is built.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from autosched._tvm import (
    SAMPLE_KINDS,
    IRModule,
    Schedule,
    ScheduleError,
    Target,
    Trace,
    as_python,
    load_tensor_intrins,
    ms,
)
from autosched.config import resolve_threads
from autosched.errors import InvalidConfig
from autosched.spaces.base import SearchSpace
from autosched.spaces.designs import EXTRA_DESIGNS, ExtraDesign
from autosched.spaces.gpu_repair import repair_gpu_setting
from autosched.spaces.knobs import Knob
from autosched.spaces.microkernel import DEFAULT_UNROLL, microkernel_params
from autosched.spaces.settings import SpaceSettings
from autosched.spaces.tiling import decode_tile, divisors, refit_tile  # noqa: F401 - refit_tile: importers

log = logging.getLogger("autosched.spaces")


def _same_design(design: Trace, trace: Trace) -> bool:
    """``trace`` starts with ``design``'s instructions (same kinds and attributes) and samples nothing after."""
    n = len(design.insts)
    if len(trace.insts) < n or any(i.kind.name in SAMPLE_KINDS for i in trace.insts[n:]):
        return False
    return all(a.kind.name == b.kind.name and str(a.attrs) == str(b.attrs)
               for a, b in zip(design.insts, trace.insts[:n], strict=True))


def most_fused(designs: list[Trace]) -> list[Trace]:
    """The designs with the most epilogues fused: a consumer block moved into its producer's loop nest
    (``ReverseComputeAt`` of a block that is not the producer's own write cache), so the bias, activation and
    residual after a matmul or conv are computed tile by tile right after the store instead of in a second
    pass over its output. A function without an epilogue keeps all its designs."""
    counts = [_fused_epilogues(d) for d in designs]
    return [d for d, n in zip(designs, counts, strict=True) if n == max(counts, default=0)]


def _fused_epilogues(design: Trace) -> int:
    made_by: dict[Any, str] = {}
    n = 0
    for inst in design.insts:
        if inst.kind.name == "ReverseComputeAt" and made_by.get(inst.inputs[0]) != "CacheWrite":
            n += 1
        for out in inst.outputs:
            made_by[out] = inst.kind.name
    return n


STREAMING_LANES = 16  # the streaming design's default vector width
WHOLE_ROW_LANES = 64  # a row up to this long that no width of 4, 8 or 16 divides is one vector


def streaming_vector(extent: int, max_innermost: int = 0, whole_rows: bool = True) -> int:
    """The default vector of a streaming-lanes design along ``extent``: 16 lanes or the widest below that divides
    it; where that is not a multiple of 4 (a row of 49: 7 lanes), the whole row, if the knob allows it (LLVM splits
    a 49-lane vector into 3 full registers and a remainder: a softmax over Swin's 49-token rows ran 2.4x faster
    than in 7-lane vectors, 2 threads, Zen 5)."""
    lanes = max(d for d in divisors(extent) if d <= STREAMING_LANES)
    whole = whole_rows and extent <= WHOLE_ROW_LANES and (not max_innermost or extent <= max_innermost)
    return extent if lanes % 4 and whole else lanes


class TraceSearchSpace(SearchSpace):
    def __init__(self, mod: IRModule, target: Target, settings: SpaceSettings, seed: int = 0):
        self.target, self.settings, self.version = target, settings, settings.version
        self.mod = settings.prepare(mod)  # what is scheduled (records replay on the same: apply.py)
        load_tensor_intrins(target)
        ctx = ms.TuneContext(
            mod=self.mod,
            target=target,
            space_generator=ms.space_generator.PostOrderApply(
                sch_rules=settings.schedule_rules(target), postprocs=settings.make_postprocs(), mutator_probs={}
            ),
            task_name="main",
            num_threads=resolve_threads(),
            rand_state=seed,
        )
        self.context = ctx  # also what the feature extractor needs
        self._postprocs = list(ctx.space_generator.postprocs)
        extras = [e for e in EXTRA_DESIGNS if getattr(settings, e.flag) and target.kind.name in e.target_kinds]
        early = {e.name: e.build(self.mod, target) for e in extras if e.before_rules}
        try:
            self.designs: list[Trace] = [s.trace for s in ctx.generate_design_space()]
        except (ScheduleError, RuntimeError):
            if all(trace is None for trace in early.values()):
                raise
            self.designs = []  # the rules fail on a fused attention (reverse_compute_at): its own design only
        if settings.fuse_epilogues:
            self.designs = most_fused(self.designs)
        self._extras: dict[int, ExtraDesign] = {}  # index -> entry of each extra design the function has
        self._sources: dict[int, int] = {}  # a copy's index -> the design it copies
        for extra in extras:  # appended: stored records keep their design
            self._append_extra(extra, early)
        self._knobs = [self._design_knobs(d, trace) for d, trace in enumerate(self.designs)]

    def _append_extra(self, extra: ExtraDesign, early: dict[str, Trace | None]) -> None:
        """Append ``extra``'s design for this function, where it has one (``early``: those built already)."""
        if extra.copies_preferred:
            source = self._preferred_order()[0]
            trace = extra.build(self.mod, self.target, self.designs[source])
        else:
            trace = early[extra.name] if extra.name in early else extra.build(self.mod, self.target)
        if trace is None:
            return
        self.designs.append(trace)
        self._extras[len(self.designs) - 1] = extra
        if extra.copies_preferred:
            self._sources[len(self.designs) - 1] = source

    def design_index(self, name: str) -> int | None:
        """The index of the extra design ``name`` (``designs.EXTRA_DESIGNS``), where the function has it."""
        return next((index for index, extra in self._extras.items() if extra.name == name), None)

    def source_of(self, design: int | None) -> int | None:
        """The design that ``design`` is a copy of (the serial design's source); None for any other."""
        return self._sources.get(design)

    # --- knobs ---------------------------------------------------------------------------------------------
    def _design_knobs(self, design: int, trace: Trace) -> list[Knob]:
        knobs = []
        for i, inst in enumerate(x for x in trace.insts if x.kind.name in SAMPLE_KINDS):
            kind, decision, prefix = inst.kind.name, trace.decisions[inst], f"d{design}.{i}"
            if kind == "SamplePerfectTile":
                n_levels, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
                extent = 1
                for f in decision:
                    extent *= int(f)
                top = len(divisors(extent)) - 1
                for level in range(1, n_levels):
                    knobs.append(Knob(f"{prefix}.tile{level}", inst, kind, IntDistribution(0, top),
                                       extent, n_levels, max_inner if max_inner > 0 else extent))
            elif kind == "SampleCategorical":
                n = len(inst.attrs[0])
                knobs.append(Knob(f"{prefix}.cat", inst, kind, IntDistribution(0, max(n - 1, 0)),
                                   choices=tuple(as_python(c) for c in inst.attrs[0])))
            else:
                knobs.append(Knob(f"{prefix}.loc", inst, kind, IntDistribution(-2, self._max_location(trace, inst))))
        return knobs

    def _max_location(self, trace: Trace, inst: Any) -> int:
        """Out-of-range locations are remapped by TVM to the last valid one: ask for a huge one to learn it."""
        sch = Schedule(self.mod, error_render_level="none")
        try:
            trace.with_decision(inst, 1 << 20, remove_postproc=True).apply_to_schedule(sch, remove_postproc=True)
        except (ScheduleError, RuntimeError):
            return max(int(trace.decisions[inst]), 0)
        last = 0
        for applied in sch.trace.insts:
            if applied.kind.name == "SampleComputeLocation" and int(sch.trace.decisions[applied]) >= -2:
                last = int(sch.trace.decisions[applied])
        return max(last, int(trace.decisions[inst]), 0)

    def tile_knobs(self, design: int) -> dict[Any, list[Knob]]:
        """The design's tilings: sampling instruction -> its knobs (levels 1..n-1), in trace order."""
        out: dict[Any, list[Knob]] = {}
        for k in self._knobs[design]:
            if k.kind == "SamplePerfectTile":
                out.setdefault(k.inst, []).append(k)
        return out

    def categorical_knobs(self, design: int) -> list[Knob]:
        return [k for k in self._knobs[design] if k.kind == "SampleCategorical"]

    @functools.cached_property
    def design_signatures(self) -> frozenset[str]:
        """Each design's structure without its sizes (its instructions' kinds and attributes, decisions left out):
        a space that shares one with this space can take this space's schedules, refitted (``transfer_params``)."""
        return frozenset(hashlib.sha1(repr([(i.kind.name, str(i.attrs)) for i in d.insts]).encode()).hexdigest()
                         for d in self.designs)

    def knobs(self, design: int | None = None) -> dict[str, BaseDistribution]:
        if design is not None:
            return {k.name: k.distribution for k in self._knobs[design]}
        out: dict[str, BaseDistribution] = {"design": CategoricalDistribution(list(range(len(self.designs))))}
        for knobs in self._knobs:
            out.update({k.name: k.distribution for k in knobs})
        return out

    def size(self) -> int:
        total = 0
        for knobs in self._knobs:
            n = 1
            for k in knobs:
                n *= k.distribution.high - k.distribution.low + 1
            total += n
        return total

    # --- apply ---------------------------------------------------------------------------------------------
    def decisions(self, params: dict[str, Any]) -> tuple[Trace, dict[Any, Any]]:
        design = int(params.get("design", 0))
        trace, knobs = self.designs[design], self._knobs[design]
        out: dict[Any, Any] = {}
        tiles: dict[Any, list[int]] = {}
        for k in knobs:
            if k.kind == "SamplePerfectTile":
                tiles.setdefault(k.inst, []).append(int(params[k.name]))
            else:
                out[k.inst] = int(params[k.name])
        for k in knobs:
            if k.kind == "SamplePerfectTile" and k.inst not in out:
                out[k.inst] = decode_tile(k.extent, k.n_levels, k.max_innermost, tiles[k.inst])
        return trace, out

    def _check(self, trace: Trace, decisions: dict[Any, Any]) -> None:
        """The [checks] of the settings, on decoded decisions (cheap; before anything is built)."""
        limit = self.settings.checks.get("max_register_tile")
        if not limit:
            return
        run_levels, tile = 0, 1
        for inst in trace.insts:  # consecutive spatial tilings of a block share a level count
            if inst.kind.name != "SamplePerfectTile" or inst not in decisions:
                continue
            factors = decisions[inst]
            if len(factors) != run_levels:
                run_levels, tile = len(factors), 1
            if run_levels >= 3:
                tile *= int(factors[-1])
                if tile > limit:
                    raise InvalidConfig(f"register tile of {tile} elements > max_register_tile {limit}")

    def apply(self, params: dict[str, Any]) -> Schedule:
        trace, decisions = self.decisions(params)
        self._check(trace, decisions)
        postprocs = self._postprocs
        # e.g. the concatenation's parts (and its serial copy's) start past 0, which RewriteLayout cannot index
        origin = self._extras.get(self._origin(int(params.get("design", 0))))
        if origin is not None and not origin.layout_rewrite:
            postprocs = [p for p in postprocs if not isinstance(p, ms.postproc.RewriteLayout)]
        if origin is not None and origin.dynamic_shared_memory:
            postprocs = [self._verify_dynamic_shared if isinstance(p, ms.postproc.VerifyGPUCode) else p
                         for p in postprocs]
        return self._schedule(trace, decisions, postprocs)

    @functools.cached_property
    def _verify_dynamic_shared(self) -> Any:
        """VerifyGPUCode with the GPU's opt-in shared memory per block as its limit (a design whose shared memory
        is all dynamic: ``ExtraDesign.dynamic_shared_memory``)."""
        from autosched.targets import max_dynamic_shared_memory

        config = {**self.target.export(), "max_shared_memory_per_block": max_dynamic_shared_memory(self.target)}
        verify = ms.postproc.VerifyGPUCode()
        verify._initialize_with_tune_context(ms.TuneContext(mod=self.mod, target=Target(config), task_name="main"))
        return verify

    def repair(self, params: dict[str, Any], seed: int = 0, max_steps: int = 200, max_applies: int = 10
               ) -> tuple[dict[str, Any], Schedule] | None:
        """On a GPU, a legal setting near ``params`` and its schedule (``spaces/gpu_repair.py``); None on a CPU
        (its few rejections are better left to the sampler) or where none is found."""
        if self.target.kind.name == "llvm":
            return None
        return repair_gpu_setting(self, params, seed, max_steps, max_applies)

    def transfer(self, trace: Trace) -> Schedule:
        """This function's schedule after the trace of a schedule of a function with the same structure at other
        sizes (a record of another shape bucket, or a task like this one): ``apply(transfer_params(trace))``."""
        return self.apply(self.transfer_params(trace))

    def transfer_params(self, trace: Trace) -> dict[str, Any]:
        """Knob values that give this function the trace's design and decisions, every tiling refitted to this
        function's extents (``refit_tile``); the postprocessors, when applied, redo the parallel, vector and
        unroll splits for these extents. InvalidConfig where no design has the trace's structure."""
        donor = [trace.decisions[i] for i in trace.insts if i.kind.name in SAMPLE_KINDS]
        for design, knobs in enumerate(self._knobs):
            samples = [i for i in self.designs[design].insts if i.kind.name in SAMPLE_KINDS]
            if len(samples) != len(donor) or not _same_design(self.designs[design], trace):
                continue
            old = {inst: decision for inst, decision in zip(samples, donor, strict=True)}
            params: dict[str, Any] = {"design": design}
            for k in knobs:
                if k.kind == "SamplePerfectTile":
                    level = int(k.name.rsplit("tile", 1)[1])
                    factor = refit_tile([int(f) for f in old[k.inst]], k.extent)[level]
                    params[k.name] = divisors(k.extent).index(factor)
                else:
                    params[k.name] = int(old[k.inst])
            return params
        raise InvalidConfig("no design of this function has the structure of the trace to transfer")

    def _schedule(self, trace: Trace, decisions: dict[Any, Any], postprocs: list[Any]) -> Schedule:
        """``trace`` replayed with ``decisions`` (sampling instruction -> decision), then postprocessed."""
        for inst, decision in decisions.items():
            trace = trace.with_decision(inst, decision, remove_postproc=True)
        sch = Schedule(self.mod, error_render_level="none")
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
        except (ScheduleError, RuntimeError) as err:
            raise InvalidConfig(f"schedule primitive failed: {str(err).splitlines()[0][:200]}") from err
        for postproc in postprocs:
            if not postproc.apply(sch):
                raise InvalidConfig(f"rejected by {type(postproc).__name__}")
        _check_layout_rewrites(sch)
        return sch

    def effective_decisions(self, sch: Schedule) -> list[Any]:
        trace = sch.trace
        return [as_python(trace.decisions[i]) for i in trace.insts if i.kind.name in SAMPLE_KINDS]

    def default_schedule(self) -> tuple[dict[str, Any], Schedule] | None:
        """The task's schedule without search, by rule (the CPU counterpart of dlight's GPU rules), where
        ``[designs] rule_defaults`` is on: a float32 matmul or convolution as a register-blocked micro-kernel
        (``microkernel_params``' first tile, unrolled ``DEFAULT_UNROLL``: 100-240 GFLOPS on ResNet-50's
        convolutions at 2 threads where the rules' first design's own decisions ran 7-33); else the design of its
        pattern, with vectors as wide as the CPU's: the streaming design of a reduction along a kept axis (which
        reads its input in order, the rules' first design along a stride, or, for a pooling window, through an
        rfactor of it: 82 ms instead of 0.1 ms), the partitioned concatenation (no choice between inputs per
        element), the row design of a norm or softmax (BERT's softmax: 0.1 GFLOPS in the rules' first design), the
        blockwise design of a fused attention (spaces/attention.py);
        else the first design whose own decisions are legal. Returns (its params, the schedule); None if none is
        legal."""
        if self.settings.rule_defaults and self.target.kind.name == "llvm" \
                and not any(extra.skips_microkernel for extra in self._extras.values()):
            from autosched._tvm import llvm_vector_bits

            for params in microkernel_params(self, llvm_vector_bits(self.target), unroll=DEFAULT_UNROLL):
                try:
                    return params, self.apply(params)
                except (InvalidConfig, RuntimeError, ValueError):
                    continue
        for design in self._preferred_order():
            found = self._own_decisions(design)
            if found is not None:
                return found
        return None

    def _own_decisions(self, design: int) -> tuple[dict[str, Any], Schedule] | None:
        """``design``'s own decisions (``default_params``) and their schedule; None where they are not legal."""
        params = self.default_params(design)
        try:
            return params, self.apply(params)
        except (InvalidConfig, RuntimeError, ValueError):
            return None

    def _preferred_order(self) -> list[int]:
        """The designs in the order ``default_schedule`` tries them: the preferred extra designs first, a copy (the
        serial design: ``serial_default``) left out."""
        order = [d for d in range(len(self.designs)) if d not in self._sources]
        for own, extra in self._extras.items():  # in EXTRA_DESIGNS' order: the later entry ends up first
            if extra.preferred:
                order.insert(0, order.pop(order.index(own)))
        return order

    def _origin(self, design: int) -> int:
        """The design ``design`` is a copy of (a serial copy), else itself."""
        return self._sources.get(design, design)

    def gpu_seeds(self) -> list[dict[str, Any]]:
        """On a GPU, known-good settings a search measures first: dlight's design, then the tensor-core blocks of
        ``tensor_core.tensor_core_seeds``; [] on a CPU (its micro-kernel seeds are the model tuner's)."""
        if self.target.kind.name == "llvm":
            return []
        from autosched.spaces.tensor_core import tensor_core_seeds

        dlight = self.design_index("dlight")
        return ([] if dlight is None else [self.default_params(dlight)]) + tensor_core_seeds(self)

    def serial_default(self) -> tuple[dict[str, Any], Schedule] | None:
        """The serial copy's own decisions as a schedule, where the space has one and they are legal; None
        otherwise. Measured beside ``default_schedule``: the faster of the two is what compile uses."""
        return None if self.design_index("serial") is None else self._own_decisions(self.design_index("serial"))

    def default_params(self, design: int = 0) -> dict[str, Any]:
        """Knob values that reproduce the design trace's own (randomly sampled) decisions, where encodable; for the
        designs whose entry takes ``streaming_lanes`` (streaming, row, attention), vectors of 16 lanes (AVX-512's
        float32 width) or the widest below that divides (``streaming_vector``)."""
        params: dict[str, Any] = {"design": design}
        trace, origin = self.designs[design], self._extras.get(self._origin(design))
        streaming_lanes = origin is not None and origin.streaming_lanes
        for k in self._knobs[design]:
            decision = trace.decisions[k.inst]
            if k.kind == "SamplePerfectTile" and streaming_lanes:
                whole = origin.name != "attention"  # its row tiles are no vectors: measured as they were
                params[k.name] = divisors(k.extent).index(streaming_vector(k.extent, k.max_innermost, whole))
            elif k.kind == "SamplePerfectTile":
                level = int(k.name.rsplit("tile", 1)[1])
                params[k.name] = divisors(k.extent).index(int(decision[level]))
            else:
                params[k.name] = int(decision)
        return params


def _check_layout_rewrites(sch: Schedule) -> None:
    """Reject a weight-layout rewrite that would drop elements. MetaSchedule's RewriteLayout derives the new
    layout from the consumer's accesses; where the consumer reads only part of a weight (a bias sliced after
    its convolution), the index map folds the weight onto fewer elements and the copy overwrites the part
    that is read: a wrong result (seen on a conv + bias + relu + channel slice)."""
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        if "meta_schedule.layout_rewrite_preproc" not in block.annotations:
            continue
        src, dst = block.reads[0].source, block.writes[0].source  # TVM 0.27: TensorRegion.source is the buffer
        if _n_elements(dst) < _n_elements(src):
            raise InvalidConfig(f"weight-layout rewrite of {src.name} keeps {_n_elements(dst)} of its "
                                f"{_n_elements(src)} elements")


def _n_elements(buffer: Any) -> int:
    n = 1
    for dim in buffer.shape:
        n *= int(dim)
    return n
