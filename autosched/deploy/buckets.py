"""Dynamic shapes: a model whose inputs have symbolic dimensions (batch, sequence length), tuned and compiled
for a few sizes of each (buckets), and served at any size.

Every bucket is imported, rewritten and compiled as a static model (the graph path and the search spaces
work on static shapes); tasks structurally identical across buckets are one task. At run time an input is
dispatched to its exact bucket, else to the smallest larger one with the symbolic dimensions padded with
zeros and the outputs sliced back, where that is correct for the model: compile checks it once (outputs of a
padded input against an exact build of the same input; causal attention and masked padding pass, attention
that sees every position does not). Sizes beyond every bucket, and sizes between buckets of a model that
padding would change, get an untuned build for that exact size, compiled at first use (one warning each).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosched._tvm import Target
from autosched.errors import UserInputError
from autosched.graph.frontends import InputSpec, Model
from autosched.tasks import Task

Sizes = dict[str, int]  # symbolic dimension -> its size, e.g. {"seq": 64}
SMALLEST_PICKED = 16  # picked buckets start here: below it a model's time hardly depends on the size


# --- parsing and picking -----------------------------------------------------------------------------------
_BUCKET_SPEC = re.compile(r"^([A-Za-z_][\w.]*)=(.+)$")


def parse_shape_buckets(texts: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``["seq=16,32,64"]`` -> ``{"seq": (16, 32, 64)}``; ``"seq=1..256"`` lets autosched pick the buckets
    (``pick_buckets``). Several symbols: repeat the option or separate them with ``;``."""
    buckets: dict[str, tuple[int, ...]] = {}
    for text in (part for t in texts or [] for part in t.split(";") if part.strip()):
        m = _BUCKET_SPEC.match(text.strip())
        usage = "write SYMBOL=SIZE,SIZE,... or SYMBOL=MIN..MAX, e.g. --shape-buckets seq=16,32,64,128,256"
        if not m:
            raise UserInputError(f"bad --shape-buckets {text!r}: {usage}")
        name, values = m.group(1), m.group(2).replace(" ", "")
        try:
            if ".." in values:
                low, high = (int(v) for v in values.split(".."))
                sizes = pick_buckets(low, high)
            else:
                sizes = tuple(sorted({int(v) for v in values.split(",")}))
        except ValueError as err:
            raise UserInputError(f"bad --shape-buckets {text!r}: {usage}") from err
        if not sizes or sizes[0] < 1:
            raise UserInputError(f"bad --shape-buckets {text!r}: every size must be at least 1")
        if name in buckets:
            raise UserInputError(f"--shape-buckets names {name!r} twice: give all its sizes at once")
        buckets[name] = sizes
    return buckets


def pick_buckets(low: int, high: int) -> tuple[int, ...]:
    """Buckets covering sizes ``low..high``: powers of two from the first one at or above ``low`` (at least
    ``SMALLEST_PICKED``, or ``high``), then ``high`` itself. A size pads by less than 2x, and the smallest
    bucket takes every size below it (where the model's time hardly depends on the size)."""
    if low < 1 or high < low:
        raise ValueError(f"bad range {low}..{high}")
    size = max(1 << (low - 1).bit_length(), SMALLEST_PICKED)
    picked = []
    while size < high:
        picked.append(size)
        size *= 2
    return tuple(picked + [high])


def fill_sizes(tuned: Sequence[int], max_padding: float) -> tuple[int, ...]:
    """Sizes to compile besides the tuned buckets ``tuned`` (with their schedules refitted: ``compile_buckets``),
    so that a size pads by at most ``max_padding`` (1.25: a quarter more) where the grid allows. From each
    bucket down, while the sizes just above the bucket below would pad by more: the smallest grid size within
    the bound, else the next grid size down."""
    if max_padding <= 1:
        raise UserInputError(f"--max-padding {max_padding}: give a ratio above 1, e.g. 1.25")
    grid = [g for g in range(1, max(tuned) + 1) if tile_friendly(g)]
    picked: set[int] = set()
    low = 0
    for high in sorted(tuned):
        size = high
        while size > (low + 1) * max_padding and (below := [g for g in grid if low < g < size]):
            within = [g for g in below if g * max_padding >= size]
            size = min(within) if within else max(below)
            picked.add(size)
        low = high
    return tuple(sorted(picked - set(tuned)))


def tile_friendly(size: int) -> bool:
    """1, 2, 4, 12, and multiples of 8 whose odd part is at most 7 (8, 16, 24, 40, 48, 56, 80, 96, 112, 160, ...):
    a bucket's tiles, refitted to such a size, keep their power-of-two factors. Measured on GPT-2 (seq=256's
    schedules refitted): a build for 136 (8 x 17) ran seq=129..135 at 1.6-1.8x ONNX Runtime's time, one for 160
    at 1.1-1.3x; builds for 20 and 28 (4 x 5, 4 x 7) were slower than the bucket of 32 they stand in for."""
    odd = size
    while odd % 2 == 0:
        odd //= 2
    return size in (1, 2, 4, 12) or (size % 8 == 0 and odd <= 7)


def bucket_label(sizes: Sizes) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))


# --- the model at each bucket -------------------------------------------------------------------------------
@dataclass
class SymbolicInputs:
    """Which input dimensions are which symbol: ``axes[input name] = {axis: symbol}``, plus the fixed ones."""

    declared: dict[str, tuple[list[int | str], str]]  # input -> (dims, dtype); a str dim is a symbol
    fixed: dict[str, tuple[int, ...]]  # --input shapes (inputs without a bucketed symbol)

    @functools.cached_property
    def axes(self) -> dict[str, dict[int, str]]:
        return {name: {i: d for i, d in enumerate(dims) if isinstance(d, str)}
                for name, (dims, _) in self.declared.items() if name not in self.fixed}

    def symbols(self) -> set[str]:
        return {s for per_input in self.axes.values() for s in per_input.values()}

    def shapes(self, sizes: Sizes) -> dict[str, tuple[int, ...]]:
        out = dict(self.fixed)
        for name, (dims, _) in self.declared.items():
            if name not in self.fixed:
                out[name] = tuple(sizes[d] if isinstance(d, str) else int(d) for d in dims)
        return out

    def sizes_of(self, arrays: Sequence[Any], names: Sequence[str]) -> Sizes:
        """The symbols' sizes in a call's inputs; a symbol with two sizes is a one-line error."""
        sizes: Sizes = {}
        for name, a in zip(names, arrays, strict=True):
            dims, _ = self.declared[name]
            shape = tuple(a.shape)
            if len(shape) != len(dims):
                raise UserInputError(f"input {name!r} must have rank {len(dims)} "
                                     f"({'x'.join(map(str, dims))}), got shape {shape}")
            for axis, symbol in self.axes.get(name, {}).items():
                if sizes.setdefault(symbol, shape[axis]) != shape[axis]:
                    raise UserInputError(f"dimension {symbol!r} is {sizes[symbol]} in one input and {shape[axis]} "
                                         f"in {name!r}: give every input the same {symbol}")
        return sizes


def symbolic_inputs(source: Any, buckets: dict[str, tuple[int, ...]],
                    fixed: dict[str, tuple[int, ...]] | None = None) -> SymbolicInputs:
    """The symbolic dimensions of an ONNX model's inputs, checked against the buckets: every symbol of an
    input without ``--input`` must have buckets, and every bucketed symbol must exist."""
    from autosched.graph.frontends import _import_onnx, onnx_input_dims

    if isinstance(source, (str, Path)):
        if not Path(source).is_file():
            raise UserInputError(f"model file {source} does not exist: check the path")
        proto = _import_onnx().load(str(source), load_external_data=False)
    elif type(source).__name__ == "ModelProto":
        proto = source
    else:
        raise UserInputError("--shape-buckets needs an ONNX model with symbolic dimensions: export it with "
                             "dynamic axes (torch.onnx.export(..., dynamic_axes=...))")
    found = SymbolicInputs(onnx_input_dims(proto), dict(fixed or {}))
    symbols = found.symbols()
    unknown = sorted(set(buckets) - symbols)
    if unknown:
        raise UserInputError(f"the model has no symbolic dimension {', '.join(map(repr, unknown))}; its symbolic "
                             f"dimensions are: {', '.join(sorted(symbols)) or '(none: its shapes are fixed)'}")
    missing = sorted(symbols - set(buckets))
    if missing:
        raise UserInputError(f"symbolic dimension(s) {', '.join(map(repr, missing))} have no buckets: add them to "
                             "--shape-buckets (e.g. batch=1,8) or fix the inputs that have them with --input")
    return found


def bucket_sizes(buckets: dict[str, tuple[int, ...]]) -> list[Sizes]:
    """Every combination of the symbols' buckets, smallest first."""
    names = sorted(buckets)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(buckets[n] for n in names))]


def load_buckets(source: Any, buckets: dict[str, tuple[int, ...]], fixed: dict[str, tuple[int, ...]] | None = None,
                 name: str | None = None) -> tuple[SymbolicInputs, list[tuple[Sizes, Model]]]:
    """The model imported once per bucket (static shapes), named ``name@seq=64``."""
    from autosched.graph.frontends import load_model

    symbolic = symbolic_inputs(source, buckets, fixed)
    models = []
    for sizes in bucket_sizes(buckets):
        model = load_model(source, symbolic.shapes(sizes), name=name)
        model.name = f"{model.name}@{bucket_label(sizes)}"
        models.append((sizes, model))
    return symbolic, models


def merge_bucket_tasks(per_bucket: Sequence[tuple[Sizes, list[Task]]]) -> list[Task]:
    """One task list for all buckets: a task structurally identical in several buckets is tuned once (its
    weights summed); the others are named after their bucket."""
    by_key: dict[str, Task] = {}
    for sizes, tasks in per_bucket:
        for task in tasks:
            if task.key in by_key:
                by_key[task.key].weight += task.weight
                by_key[task.key].info["weight"] = by_key[task.key].weight
                by_key[task.key].info.setdefault("buckets", []).append(bucket_label(sizes))
            else:
                task.name = f"{task.name}@{bucket_label(sizes)}"
                task.info["buckets"] = [bucket_label(sizes)]
                by_key[task.key] = task
    return list(by_key.values())


class UntunedSizeWarning(UserWarning):
    """Inputs of a size no tuned bucket serves: a build for that size runs them (untuned, or with the schedules
    of the nearest bucket refitted where the database has them)."""


# --- serving --------------------------------------------------------------------------------------------------
@dataclass
class BucketedModel:
    """Compiled buckets of one model, called like a ``CompiledModel`` with inputs of any size."""

    symbolic: SymbolicInputs
    input_names: list[str]
    compiled: dict[str, Any]  # bucket label -> CompiledModel
    sizes: dict[str, Sizes]  # bucket label -> its sizes
    pads: bool  # padding into a larger bucket was checked to give the exact outputs
    output_axes: list[dict[int, str]]  # per output: axis -> the symbol its size is
    compile_exact: Callable[[Sizes], Any] | None  # a build for sizes outside the buckets
    pad_check: str = ""  # what the padding check found, one line
    filled: dict[str, str] = field(default_factory=dict)  # label of a size compiled with a bucket's schedules -> it
    refits: bool = False  # compile_exact refits the schedules of the nearest tuned bucket (else: untuned)
    source: Any = None  # the first bucket's Model (its name, inputs and ONNX bytes: what export_buckets writes)
    exact: dict[str, Any] = field(default_factory=dict)  # label -> CompiledModel built at first use
    _routes: dict[tuple, tuple[str | None, bool]] = field(default_factory=dict, repr=False)  # sizes -> (bucket, exact)

    def bucket_for(self, sizes: Sizes) -> str | None:
        """The exact bucket, else the smallest bucket at least as large in every symbol (None: none is)."""
        label = bucket_label(sizes)
        if label in self.compiled:
            return label
        larger = [b for b, s in self.sizes.items() if all(s[k] >= v for k, v in sizes.items())]
        return min(larger, key=lambda b: np.prod(list(self.sizes[b].values()))) if larger else None

    def route(self, sizes: Sizes) -> str:
        """How inputs of these sizes are served: 'bucket', 'filled from LABEL', 'padded to LABEL', or a build for
        exactly these sizes ('untuned build' or 'exact build, schedules of LABEL')."""
        label = self.bucket_for(sizes)
        if label is not None and label == bucket_label(sizes):
            return f"filled from {self.filled[label]}" if label in self.filled else "bucket"
        if label is not None and self.pads:
            return f"padded to {label}"
        return f"exact build, schedules of {self.donor_for(sizes)}" if self.refits else "untuned build"

    def donor_for(self, sizes: Sizes) -> str:
        """The tuned bucket whose schedules a build for ``sizes`` refits."""
        tuned = {k: v for k, v in self.sizes.items() if k not in self.filled}
        return bucket_label(_donor(tuned, sizes))

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        sizes = self.symbolic.sizes_of(arrays, self.input_names)
        key = tuple(sizes.values())
        if key not in self._routes:  # decided once per size
            label = self.bucket_for(sizes)
            exact = label is not None and label == bucket_label(sizes)
            self._routes[key] = (label if exact or (label is not None and self.pads) else None, exact)
        label, exact = self._routes[key]
        if exact:
            return self.compiled[label](*arrays)
        if label is not None:
            return self._padded(label, sizes, arrays)
        return self._exact(sizes)(*arrays)

    def between_sizes(self) -> list[Sizes]:
        """For each bucket, sizes that pad into it by about half the gap to the bucket below (for checks)."""
        out = []
        for sizes in self.sizes.values():
            between = {}
            for symbol, size in sizes.items():
                below = max((s[symbol] for s in self.sizes.values() if s[symbol] < size), default=0)
                between[symbol] = (below + size) // 2 + 1 if size - below > 1 else size
            if between != sizes:
                out.append(between)
        return out

    def _padded(self, label: str, sizes: Sizes, arrays: Sequence[Any]) -> list[np.ndarray]:
        """Inputs written into the bucket's own staging tensors (no allocation, passed without another copy),
        the padding zeroed, and the outputs sliced back to ``sizes`` (views, no copy)."""
        compiled = self.compiled[label]
        caller = compiled._caller()
        with caller.lock:  # the staging tensors are the caller's: one thread at a time writes and runs them
            staging = caller.staging_views
            for name, a, buf in zip(self.input_names, arrays, staging, strict=True):
                axes = self.symbolic.axes.get(name, {})
                buf[tuple(slice(0, n) for n in a.shape)] = _as_numpy(a)
                for axis, symbol in axes.items():
                    if sizes[symbol] < buf.shape[axis]:
                        buf[(slice(None),) * axis + (slice(sizes[symbol], None),)] = 0
            outputs = compiled(*staging)
        return [o[tuple(slice(0, sizes[axes[i]]) if i in axes else slice(None) for i in range(o.ndim))]
                for o, axes in zip(outputs, self.output_axes, strict=True)]

    def _exact(self, sizes: Sizes) -> Any:
        label = bucket_label(sizes)
        if label not in self.exact:
            if self.compile_exact is None:
                raise UserInputError(f"sizes {label} are outside the compiled buckets ({', '.join(self.compiled)}) "
                                     "and this model cannot be rebuilt here: compile it with a larger bucket")
            why = ("beyond every bucket" if self.bucket_for(sizes) is None
                   else "between buckets, and padding changes this model's outputs")
            build = (f"a build for them with the schedules of {self.donor_for(sizes)} refitted" if self.refits
                     else "an untuned build for them")
            warnings.warn(f"input sizes {label} are {why} ({'; '.join(self.compiled)}): running {build}, compiled "
                          "once now; add a bucket to tune them", UntunedSizeWarning, stacklevel=3)
            self.exact[label] = self.compile_exact(sizes)
        return self.exact[label]

    def counts(self) -> dict[str, Any]:
        return {label: c.counts() for label, c in self.compiled.items()}


def _as_numpy(a: Any) -> np.ndarray:
    return a.detach().cpu().numpy() if type(a).__module__.startswith("torch") else np.asarray(a)


def output_axes(outputs_by_bucket: Sequence[tuple[Sizes, Sequence[np.ndarray]]]) -> list[dict[int, str]] | None:
    """Which output dimensions are which symbol: a dimension whose size is the symbol's size in every bucket.
    None when an output dimension changes between buckets some other way (slicing cannot undo padding).
    With one bucket a dimension that merely equals a symbol's size is taken for it: the padding check
    (``_check_padding``) turns padding off where that guess is wrong."""
    first_sizes, first = outputs_by_bucket[0]
    found: list[dict[int, str]] = []
    for j, out in enumerate(first):
        axes: dict[int, str] = {}
        for i in range(out.ndim):
            symbol = next((s for s in sorted(first_sizes)
                           if all(outs[j].shape[i] == sz[s] for sz, outs in outputs_by_bucket)), None)
            if symbol is not None:
                axes[i] = symbol
            elif len({outs[j].shape[i] for _, outs in outputs_by_bucket}) > 1:
                return None
        found.append(axes)
    return found


def compile_buckets(symbolic: SymbolicInputs, models: list[tuple[Sizes, Model]], target: Target, db: Any,
                    reload: Callable[[Sizes], Model] | None, on_bucket: Callable[[str], None] | None = None,
                    seed: int = 0, fused: Sequence[Any] | None = None,
                    max_padding: float | None = None) -> BucketedModel:
    """Compile every bucket with the database's schedules, then check once whether padding into a bucket
    gives the exact outputs (see the module docstring). ``reload(sizes)``: the model at other sizes (for the
    check and for sizes outside the buckets); without it those sizes are an error. ``fused``: each bucket's
    model already through the graph rewrites. ``max_padding`` (e.g. 1.25): also compile the sizes of
    ``fill_sizes`` between the buckets, each with the schedules of the bucket it would pad into (tiles refitted:
    ``TraceSearchSpace.transfer``), so that padding costs at most that much; one more build per size, and its
    own copy of the weights in memory."""
    from autosched.deploy.build import compile_model, compile_unscheduled
    from autosched.graph.passes import rewrite

    if max_padding is not None:
        fill_sizes((1,), max_padding)  # a bad ratio is refused before anything is built
    compiled, sizes_of, outputs, rewritten = {}, {}, [], {}
    for i, (sizes, model) in enumerate(models):
        label = bucket_label(sizes)
        if on_bucket is not None:
            on_bucket(label)
        rewritten[label] = fused[i] if fused is not None else rewrite(model.mod, target)
        compiled[label] = compile_model(model, target, db, fused=rewritten[label])
        sizes_of[label] = sizes
        outputs.append((sizes, compiled[label](*check_inputs(model.inputs, seed))))
    names = [s.name for s in models[0][1].inputs]
    untuned = (lambda sizes: compile_unscheduled(reload(sizes), target)) if reload is not None else None
    tuned = dict(sizes_of)

    def refitted(sizes: Sizes) -> Any:  # a size outside the buckets: the nearest bucket's schedules, refitted
        return compile_model(reload(sizes), target, db, donor=rewritten[bucket_label(_donor(tuned, sizes))])

    refits = db is not None and reload is not None
    axes = output_axes(outputs)
    bucketed = BucketedModel(symbolic, names, compiled, sizes_of, False, axes or [],
                             refitted if refits else untuned, refits=refits)
    bucketed.source = models[0][1]
    bucketed.pads, bucketed.pad_check = _check_padding(bucketed, models, axes, untuned, seed)
    if max_padding is not None and reload is not None and bucketed.pads:
        for sizes in _filled(tuned, max_padding):
            label, donor = bucket_label(sizes), bucket_label(_donor(tuned, sizes))
            if on_bucket is not None:
                on_bucket(f"{label} (schedules of {donor})")
            model = reload(sizes)
            compiled[label] = compile_model(model, target, db, donor=rewritten[donor])
            sizes_of[label], bucketed.filled[label] = sizes, donor
    return bucketed


def _filled(tuned: dict[str, Sizes], max_padding: float) -> list[Sizes]:
    """Every combination of the symbols' tuned and ``fill_sizes`` sizes that is not a tuned bucket."""
    symbols = sorted(next(iter(tuned.values())))
    per_symbol = {s: sorted({t[s] for t in tuned.values()}) for s in symbols}
    grids = {s: sorted(set(v) | set(fill_sizes(v, max_padding))) for s, v in per_symbol.items()}
    combos = [dict(zip(symbols, c, strict=True)) for c in itertools.product(*(grids[s] for s in symbols))]
    return [c for c in combos if bucket_label(c) not in tuned]


def _donor(tuned: dict[str, Sizes], sizes: Sizes) -> Sizes:
    """The tuned bucket ``sizes`` would pad into (else the largest): its schedules fit these sizes best."""
    larger = [t for t in tuned.values() if all(t[k] >= v for k, v in sizes.items())]
    pool = larger or list(tuned.values())
    return min(pool, key=lambda t: np.prod(list(t.values()))) if larger else max(
        pool, key=lambda t: np.prod(list(t.values())))


def _check_padding(bucketed: BucketedModel, models: list[tuple[Sizes, Model]], axes: list | None,
                   exact: Callable[[Sizes], Any] | None, seed: int) -> tuple[bool, str]:
    """Padding is correct for this model if a size between buckets, padded, gives the outputs of an exact
    build at that size (relative error <= 1e-4), for a size that pads by about half its bucket."""
    from autosched.deploy.reference import max_relative_error

    if axes is None:
        return False, "padding off: an output's size depends on the input sizes in a way slicing cannot undo"
    if exact is None:
        return False, "padding off: the model cannot be rebuilt here to check it"
    sizes, model = models[0]
    probe = {k: max(1, v // 2 + 1) for k, v in sizes.items()}
    if bucket_label(probe) == bucket_label(sizes):
        return True, "nothing to pad: every bucket is size 1"
    label = bucket_label(sizes)
    reference = exact(probe)
    if not bucketed.refits:  # else a size served exactly gets the bucket's schedules, not this untuned build
        bucketed.exact[bucket_label(probe)] = reference
    inputs = []
    for spec, x in zip(model.inputs, check_inputs(model.inputs, seed), strict=True):
        ax = bucketed.symbolic.axes.get(spec.name, {})
        inputs.append(x[tuple(slice(0, probe[ax[i]]) if i in ax else slice(None) for i in range(x.ndim))])
    want = reference(*inputs)
    got = bucketed._padded(label, probe, inputs)
    error = max_relative_error(got, want)
    if error <= 1e-4:
        return True, (f"padding on: {bucket_label(probe)} padded to {label} matches an exact build "
                      f"(rel. error {error:.1e})")
    return False, (f"padding off: {bucket_label(probe)} padded to {label} differs from an exact build "
                   f"(rel. error {error:.1e}); sizes between buckets get exact untuned builds")


def check_inputs(specs: Sequence[InputSpec], seed: int) -> list[np.ndarray]:
    """Random inputs; integers 0 or 1 (valid token ids, masks and indices for any model), not all zero, so
    that positions differ and a model that looks at padding shows it."""
    rng = np.random.default_rng(seed)
    return [spec.random(rng) if np.issubdtype(np.dtype(spec.dtype), np.floating)
            else rng.integers(0, 2, spec.shape).astype(spec.dtype) for spec in specs]


def export_buckets(bucketed: BucketedModel, path: Path, onnx_bytes: bytes | None) -> list[Path]:
    """One library per bucket (``model.seq=64.so``) and ``path.json``, the manifest ``load_compiled`` reads;
    the ONNX model beside it (``path.onnx``) lets a loaded library build sizes outside its buckets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for label, c in bucketed.compiled.items():
        lib = path.with_name(f"{path.stem}.{label.replace(',', '.')}{path.suffix}")
        c.export_library(lib)
        written.append(lib)
    if onnx_bytes is not None:
        Path(str(path) + ".onnx").write_bytes(onnx_bytes)
    meta = {"buckets": {label: {"sizes": bucketed.sizes[label], "library": lib.name}
                        for label, lib in zip(bucketed.compiled, written, strict=True)},
            "declared": {k: [list(d), t] for k, (d, t) in bucketed.symbolic.declared.items()},
            "fixed": {k: list(v) for k, v in bucketed.symbolic.fixed.items()},
            "inputs": bucketed.input_names, "pads": bucketed.pads, "pad_check": bucketed.pad_check,
            "filled": bucketed.filled,
            "output_axes": [{str(i): s for i, s in axes.items()} for axes in bucketed.output_axes],
            "target": next(iter(bucketed.compiled.values())).target}
    Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
    return written


def load_buckets_library(path: Path, meta: dict[str, Any]) -> BucketedModel:
    """A bucketed model written by ``export_buckets``."""
    from autosched.deploy.artifact import read_library_meta
    from autosched.deploy.build import compile_unscheduled, load_library
    from autosched.graph.frontends import load_model

    symbolic = SymbolicInputs({k: (list(d), t) for k, (d, t) in meta["declared"].items()},
                              {k: tuple(v) for k, v in meta["fixed"].items()})
    compiled = {label: load_library(library, read_library_meta(Path(str(library) + ".json")))
                for label, b in meta["buckets"].items() for library in [path.with_name(b["library"])]}
    onnx_path = Path(str(path) + ".onnx")
    exact = None
    if onnx_path.exists():
        target = Target(json.loads(meta["target"]))

        def exact(sizes: Sizes) -> Any:
            return compile_unscheduled(load_model(onnx_path, symbolic.shapes(sizes)), target)

    return BucketedModel(symbolic, meta["inputs"], compiled, {k: b["sizes"] for k, b in meta["buckets"].items()},
                         meta["pads"], [{int(i): s for i, s in axes.items()} for axes in meta["output_axes"]],
                         exact, meta.get("pad_check", ""), meta.get("filled", {}))

