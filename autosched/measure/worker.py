"""Functions that run inside the isolated worker processes (TVM's PopenPoolExecutor).

Kept free of autosched's heavier imports: a worker needs TVM, numpy and this file only.
"""

from __future__ import annotations

import os
import time
from typing import Any

_NPZ_CACHE: dict[str, dict[str, Any]] = {}


def init_worker(n_threads: int | None) -> None:
    """Worker initializer: killed with its parent from now on, the inspect fix, then the CPU thread-pool size
    (before any kernel runs)."""
    from autosched._tvm import install_fast_inspect
    from autosched.scratch import die_with_parent

    die_with_parent()

    install_fast_inspect()
    if n_threads:
        os.environ["TVM_NUM_THREADS"] = str(n_threads)
        import tvm_ffi

        tvm_ffi.get_global_func("runtime.config_threadpool")(1, n_threads)


def build(mod_json: str, target_json: str, out_path: str) -> float:
    """Compile a scheduled IRModule for the target and export it as a shared library. Returns seconds."""
    import json

    import tvm
    from tvm.target import Target

    start = time.perf_counter()
    mod = tvm.ir.load_json(mod_json)
    mod = _with_timed_variant(mod, out_path)
    from autosched.targets import export_compiler

    target = Target(json.loads(target_json))
    executable = tvm.compile(mod, target=target)
    executable.export_library(out_path, fcompile=export_compiler(target))  # another architecture's: cross-linked
    return time.perf_counter() - start


TIMED = "main_timed"  # the kernel reading weights already in its schedule's layout
PREPACK = "main_weight_prepack"  # the weights' layout rewrite alone


def _with_timed_variant(mod: Any, out_path: str) -> Any:
    """If the schedule rewrites the layout of constant weights inside the kernel, split it as a model's build
    does (Relax's ``SplitLayoutRewritePreproc``): ``main_weight_prepack`` lays the weights out, ``main_timed``
    computes from weights already laid out. At inference the prepacking is folded into the constants at compile
    time, so ``main_timed`` is what is timed (MetaSchedule measures the same way), and the two together are what
    is checked: one copy of the kernel is compiled, not two. Which arguments are prepacked, and the timed
    kernel's argument shapes, go to ``out_path + '.timed.json'``."""
    import json

    import tvm
    from tvm import relax

    main = mod["main"]
    if main.attrs is None or "layout_free_buffers" not in main.attrs:
        return mod
    shapes = _arg_specs(main)
    bb = relax.BlockBuilder()
    args = [relax.Var(f"a{i}", relax.TensorType(shape, dtype)) for i, (shape, dtype) in enumerate(shapes)]
    with bb.function("wrapper", args[:-1]):  # the weights are inputs; only the arguments' positions matter here
        kernel = bb.add_func(main, "main")
        out = bb.emit(relax.call_tir(kernel, args[:-1], relax.TensorType(*shapes[-1])))
        bb.emit_func_output(out)
    split = relax.transform.SplitLayoutRewritePreproc()(bb.get())
    if PREPACK not in [gv.name_hint for gv in split.get_global_vars()]:
        return mod  # no weight is re-laid out
    prepack, timed = split[PREPACK], split["main_prepacked"]
    position = {p.name: i for i, p in enumerate(main.params)}
    # the weights in the order main_weight_prepack takes them (its laid-out outputs follow in the same order)
    prepacked = [position[p.name] for p in prepack.params[:len(prepack.params) // 2]]
    spec = {"shapes": _arg_specs(timed), "prepacked": prepacked}
    with open(out_path + ".timed.json", "w") as f:
        json.dump(spec, f)
    return tvm.IRModule({TIMED: timed.with_attr("global_symbol", TIMED),
                         PREPACK: prepack.with_attr("global_symbol", PREPACK)})


def _arg_specs(func: Any) -> list:
    """[shape, dtype] of each parameter of a PrimFunc (TVM 0.27: params carry their buffer types)."""
    return [[[int(d) for d in p.shape], str(p.dtype)] for p in func.params]


def save_io(path: str, arrays: dict[str, Any]) -> None:
    """``np.savez`` that keeps ml_dtypes arrays (bfloat16, float8): .npz stores them as raw bytes, so they are
    saved as unsigned integers of their width with their dtype's name beside them."""
    import numpy as np

    encoded = {}
    for k, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind == "V":  # an ml_dtypes type
            encoded[k], encoded[f"mldtype_{k}"] = a.view(f"uint{8 * a.dtype.itemsize}"), np.array(a.dtype.name)
        else:
            encoded[k] = a
    np.savez(path, **encoded)


def _load_io(path: str) -> dict[str, Any]:
    stat = os.stat(path)
    key = f"{path}:{stat.st_mtime_ns}:{stat.st_size}"  # the file is rewritten once the reference is known
    if key not in _NPZ_CACHE:
        import ml_dtypes  # noqa: F401  (registers bfloat16 & co. with numpy)
        import numpy as np

        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files if not k.startswith("mldtype_")}
            for k in data.files:
                if k.startswith("mldtype_"):
                    name = k.removeprefix("mldtype_")
                    arrays[name] = arrays[name].view(np.dtype(str(data[k])))
            _NPZ_CACHE[key] = arrays
    return _NPZ_CACHE[key]


def run(
    lib_path: str,
    io_path: str,
    n_outputs: int,
    device: str,
    repeat: int,
    min_repeat_ms: int,
    rtol: float,
    atol: float,
    check: bool = True,
    cutoff_s: float | None = None,
    condition: str = "warm",
) -> dict[str, Any]:
    """Load a library here, check its outputs against the reference in ``io_path``, then time it
    (``measure``)."""
    import tvm

    lib = tvm.runtime.load_module(lib_path)
    return measure(lib, tvm.device(device, 0), _load_io(io_path), n_outputs, _timed_spec(lib_path), repeat,
                   min_repeat_ms, rtol, atol, check, cutoff_s, condition)


def measure(
    lib: Any,
    dev: Any,
    io: dict[str, Any],
    n_outputs: int,
    timed_spec: dict | None,
    repeat: int,
    min_repeat_ms: int,
    rtol: float,
    atol: float,
    check: bool = True,
    cutoff_s: float | None = None,
    condition: str = "warm",
) -> dict[str, Any]:
    """Check a loaded library's outputs against the reference arrays ``io``, then time it on ``dev``. The
    library and device are local ones or an RPC session's: the same code checks and times both.

    A candidate whose checking run and one warm run both take longer than ``cutoff_s`` is reported with the
    warm timing instead of the full repeats: it is far from the best, and the search only needs to know that.
    ``condition`` (CPU; one of TIMING_CONDITIONS), how the caches stand at each timed run: "warm", each run right
    after the last (everything it touches left in the caches); "flush", every argument but the first flushed from
    the caches before each repeat, one run a repeat; "rotate", every argument but the first on its own copy per
    run, enough copies to pass through twice the last-level cache (``rotated_times``). In the last two the weights
    and outputs come from memory, as inside a model too large to stay cached, and the first argument (the
    activation the model's previous kernel just wrote) stays cached.

    Returns {"status": "OK"|"WRONG_RESULT", "latencies_s": [...], "error": str|None, "outputs": optional}.
    """
    import numpy as np
    import tvm

    inputs = [tvm.runtime.tensor(io[f"in{i}"], dev) for i in range(sum(k.startswith("in") for k in io))]
    outs = [tvm.runtime.tensor(np.zeros(io[f"shape_out{i}"], io[f"dtype_out{i}"].item()), dev)
            for i in range(n_outputs)]
    name, args = "main", [*inputs, *outs]
    if timed_spec is not None:  # the weights laid out as the schedule reads them (untimed), then the kernel
        name, args = TIMED, [*_prepacked(lib, timed_spec, inputs, dev), *outs]
    start = time.perf_counter()
    lib[name](*args)
    dev.sync()
    first_run_s = time.perf_counter() - start
    if not check:
        return {"status": "OK", "latencies_s": [], "error": None, "outputs": [o.numpy() for o in outs]}
    for i, out in enumerate(outs):
        error = _compare(out.numpy(), io[f"out{i}"], rtol, atol)
        if error:
            return {"status": "WRONG_RESULT", "latencies_s": [], "error": f"output {i} differs: {error}"}
    if cutoff_s is not None and first_run_s > cutoff_s:
        # The checking run is cold (page faults, caches): a small kernel's first run
        # can take 3-10x its warm time. Only a warm run that is still past the cutoff is cut short.
        warm_s = lib.time_evaluator(name, dev, number=1, repeat=1, min_repeat_ms=0)(*args).results[0]
        if warm_s > cutoff_s:
            return {"status": "OK", "latencies_s": [warm_s], "error": None}
    on_cpu = dev.dlpack_device_type() == tvm.cpu().dlpack_device_type()
    if condition == "rotate" and on_cpu:
        return {"status": "OK", "latencies_s": rotated_times(lib[name], dev, args, len(inputs), repeat,
                                                              min_repeat_ms), "error": None}
    flush = condition == "flush" and on_cpu
    timer = lib.time_evaluator(name, dev, number=1, repeat=repeat, min_repeat_ms=0 if flush else min_repeat_ms,
                               cooldown_interval_ms=0, f_preproc="cache_flush_cpu_non_first_arg" if flush else "")
    return {"status": "OK", "latencies_s": list(timer(*args).results), "error": None}


TIMING_CONDITIONS = ("warm", "flush", "rotate")  # how a CPU kernel is timed (``measure``)
ROTATE_MAX_COPIES = 256  # a tiny kernel's arguments are copied at most this many times
ROTATE_MAX_BYTES = 1 << 30  # and never more than this much memory in all


def rotated_times(fn: Any, dev: Any, args: list[Any], n_inputs: int, repeat: int, min_repeat_ms: int) -> list[float]:
    """Seconds per run of ``fn``, ``repeat`` times: each run on the next of N copies of every argument but the
    first (the inputs copied, the outputs fresh), N enough for the copies to pass through twice the last-level
    cache, so each run finds its weights and outputs where the last N - 1 runs pushed them: out of the caches.
    A repeat is at least one pass over the copies and ``min_repeat_ms``; the time per run includes one Python
    call (a few microseconds: the same for every schedule of a task, which is what these times rank)."""
    import time as _time

    import tvm

    from autosched.bandwidth import bytes_moved, last_level_cache_bytes

    rest = args[1:]
    per_copy = bytes_moved([(tuple(a.shape), str(a.dtype)) for a in rest])
    n_copies = min(ROTATE_MAX_COPIES, max(1, -(-2 * last_level_cache_bytes() // max(per_copy, 1))),
                   max(1, ROTATE_MAX_BYTES // max(per_copy, 1)))
    copies = [list(args)]
    for _ in range(n_copies - 1):
        copies.append([args[0], *(tvm.runtime.tensor(a.numpy(), dev) if i < n_inputs else
                                  tvm.runtime.empty(a.shape, a.dtype, dev) for i, a in enumerate(rest, 1))])
    for c in copies:  # every page touched once, untimed
        fn(*c)
    dev.sync()
    times = []
    for _ in range(repeat):
        n_runs, start = 0, _time.perf_counter()
        while True:
            for c in copies:
                fn(*c)
            n_runs += len(copies)
            dev.sync()
            elapsed = _time.perf_counter() - start
            if elapsed * 1e3 >= min_repeat_ms:
                break
        times.append(elapsed / n_runs)
    return times


def _timed_spec(lib_path: str) -> dict | None:
    """What ``_with_timed_variant`` wrote beside the library at build time (None: no prepacked weights)."""
    import json

    if not os.path.exists(lib_path + ".timed.json"):
        return None
    with open(lib_path + ".timed.json") as f:
        return json.load(f)


def _compare(got: Any, want: Any, rtol: float, atol: float) -> str | None:
    """None if ``got`` matches the reference, else why not. The tolerance is relative to the largest finite
    reference value (always finite); where the reference is inf or nan, ``got`` must be the same."""
    import numpy as np

    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind == "V":  # bfloat16 and other ml_dtypes: compared as float32
        got, want = got.astype(np.float32), want.astype(np.float32)
    if not np.issubdtype(want.dtype, np.floating):
        return None if np.array_equal(got, want) else "integer values differ"
    finite = np.isfinite(want)
    scale = float(np.abs(want[finite]).max()) if finite.any() else 1.0
    if np.allclose(got, want, rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True):
        return None
    diff = np.abs(got[finite].astype(np.float64) - want[finite])
    return f"max|err|={float(np.nanmax(diff)) if diff.size else float('nan'):.3g}"


def _prepacked(lib: Any, spec: dict, inputs: list[Any], dev: Any) -> list[Any]:
    """The inputs with the prepacked weights (``spec["prepacked"]``) laid out by ``main_weight_prepack``."""
    import tvm

    shapes, indices = spec["shapes"], spec["prepacked"]
    packed = [tvm.runtime.empty(shapes[i][0], shapes[i][1], dev) for i in indices]
    lib[PREPACK](*[inputs[i] for i in indices], *packed)
    out = list(inputs)
    for i, tensor in zip(indices, packed, strict=True):
        out[i] = tensor
    return out


def ping() -> int:
    """Warm-up call: pays the worker's start (interpreter + TVM import) outside any candidate's timeout."""
    import tvm  # noqa: F401

    return os.getpid()


def run_remote(
    tracker: tuple[str, int],
    key: str,
    lib_path: str,
    io_path: str,
    n_outputs: int,
    device: str,
    repeat: int,
    min_repeat_ms: int,
    rtol: float,
    atol: float,
    check: bool = True,
    cutoff_s: float | None = None,
    session_timeout_s: float = 0.0,
    n_threads: int | None = None,
    condition: str = "warm",
) -> dict[str, Any]:
    """``run`` on a device under ``key`` at a TVM RPC tracker: one session per call, which the server kills
    after ``session_timeout_s`` (0: never). The library is uploaded; checking and timing are ``measure``."""
    from tvm import rpc

    client = rpc.connect_tracker(*tracker)
    try:
        sess = client.request(key, priority=1, session_timeout=session_timeout_s, max_retry=3)
    finally:
        client.close()
    if n_threads:
        sess.get_function("runtime.config_threadpool")(1, n_threads)
    sess.upload(lib_path)
    lib = sess.load_module(os.path.basename(lib_path))
    return measure(lib, sess.device(device, 0), _load_io(io_path), n_outputs, _timed_spec(lib_path), repeat,
                   min_repeat_ms, rtol, atol, check, cutoff_s, condition)


SKIP_RUN = 1  # tvm.runtime.vm.VMInstrumentReturnKind: the hook ran the call itself


def time_in_model(model_path: str, entry: str, io_path: str, plan_path: str, n_rounds: int,
                  seed: int = 0) -> dict[str, list[list[float]]]:
    """Time kernel variants inside a model: the VM's instrument hook runs each planned kernel call itself, with
    the model's own version (variant 0) or another schedule of the same kernel, so each variant reads what the
    model's previous kernel just wrote, with the model's weights and caches around it. Each inference gives every
    planned kernel one variant (in turn, shuffled per kernel); ``n_rounds`` inferences. Returns per kernel symbol,
    per variant, the seconds per inference (all its calls) of each inference it ran in. ``plan_path`` (JSON):
    {symbol: {"variants": [library path per variant after the model's own], "calls": [[constant positions] per
    call]}, "constants": npz path}, the npz holding each call's constant arguments as ``symbol|call|position``;
    a symbol the model calls another number of times than planned is left out of the result."""
    import json

    import numpy as np

    vm, inputs, dev = _model_vm(model_path, io_path)
    with open(plan_path) as f:
        plan = json.load(f)
    constants = _load_io(plan.pop("constants"))
    kernels = {sym: _Variants(sym, spec, constants, dev) for sym, spec in plan.items()}
    rng = np.random.default_rng(seed)

    by_symbol: dict[str, _Variants | None] = {}  # a group's kernel is called "<group>_prepacked" where the build
    # laid its weights out ahead of time

    def hook(func: Any, symbol: str, before: bool, ret: Any, *args: Any) -> int:
        if not before:
            return 0
        if symbol not in by_symbol:
            by_symbol[symbol] = kernels.get(symbol, kernels.get(symbol.removesuffix("_prepacked")))
        kernel = by_symbol[symbol]
        if kernel is None:
            return 0
        kernel.call(func, args)
        return SKIP_RUN

    vm.set_instrument(hook)
    _drop_wrong_variants(vm, entry, inputs, kernels)
    order = {sym: [] for sym in kernels}
    for r in range(n_rounds + 1):  # the first inference warms every variant's first call (not kept)
        for sym, k in kernels.items():
            if not order[sym]:
                order[sym] = [v for v in rng.permutation(len(k.fns)) if k.fns[v] is not False]
            k.start(int(order[sym].pop()) if r else 0)
        vm[entry](*inputs)
        for k in kernels.values():
            k.finish(keep=r > 0)
    vm.set_instrument(None)
    return {sym: k.samples for sym, k in kernels.items() if k.consistent}


def _drop_wrong_variants(vm: Any, entry: str, inputs: list[Any], kernels: dict[str, _Variants],
                         rtol: float = 1e-3, atol: float = 1e-4) -> None:
    """Run the model once per variant, that variant alone in place of its kernel, and leave out every variant
    whose model outputs differ from the model's own (its weights laid out wrong, say): it is never timed."""
    import tvm

    def flat(out: Any) -> list[Any]:
        return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [a for o in out for a in flat(o)]

    def run() -> list[Any]:
        return flat(vm[entry](*inputs))

    for k in kernels.values():
        k.start(0)
    want = run()
    for k in kernels.values():
        k.finish(keep=False)
    for kernel in kernels.values():
        for variant in range(1, len(kernel.fns)):
            for k in kernels.values():
                k.start(variant if k is kernel else 0)
            got = run()
            for k in kernels.values():
                k.finish(keep=False)
            if any(_compare(g, w, rtol, atol) for g, w in zip(got, want, strict=True)):
                kernel.fns[variant] = False  # never run again


def profile_model(model_path: str, entry: str, io_path: str, n_runs: int) -> dict[str, float]:
    """Each kernel symbol the model calls -> its seconds per inference (all its calls), timed inside the model
    by the VM's instrument hook over ``n_runs`` inferences after a warm-up (the VM's own builtins left out)."""
    vm, inputs, _ = _model_vm(model_path, io_path)
    vm[entry](*inputs)
    totals: dict[str, float] = {}

    def hook(func: Any, symbol: str, before: bool, ret: Any, *args: Any) -> int:
        if not before or symbol.startswith("vm.builtin."):
            return 0
        start = time.perf_counter()
        func(*args)
        totals[symbol] = totals.get(symbol, 0.0) + time.perf_counter() - start
        return SKIP_RUN

    vm.set_instrument(hook)
    for _ in range(n_runs):
        vm[entry](*inputs)
    vm.set_instrument(None)
    return {symbol: seconds / n_runs for symbol, seconds in totals.items()}


def _model_vm(model_path: str, io_path: str) -> tuple[Any, list[Any], Any]:
    """(the model library's VM on this CPU, the inputs in ``io_path`` as its tensors, the device)."""
    import tvm
    from tvm import relax

    dev = tvm.cpu(0)
    io = _load_io(io_path)
    inputs = [tvm.runtime.tensor(io[f"in{i}"], dev) for i in range(sum(k.startswith("in") for k in io))]
    return relax.VirtualMachine(tvm.runtime.load_module(model_path), dev), inputs, dev


class _Variants:
    """One kernel symbol of a model and its variants: the model's own call (0) and other schedules' libraries,
    each with the call's constant arguments (the weights) laid out as that schedule reads them."""

    def __init__(self, symbol: str, spec: dict, constants: dict[str, Any], dev: Any):
        import tvm

        self.fns: list[Any] = [None]  # None: the model's own function, as the hook receives it
        self.args: list[list[dict[int, Any]]] = [[{} for _ in spec["calls"]]]
        for path in spec["variants"]:
            lib, timed = tvm.runtime.load_module(path), _timed_spec(path)
            self.fns.append(lib[TIMED] if timed else lib["main"])
            per_call = []
            for call, positions in enumerate(spec["calls"]):
                weights = {p: tvm.runtime.tensor(constants[f"{symbol}|{call}|{p}"], dev) for p in positions}
                if timed:  # the weights laid out by this schedule's own prepacking
                    packed = _prepacked(lib, timed, [weights.get(i) for i in range(max(positions) + 1)], dev)
                    weights = {p: packed[p] for p in positions}
                per_call.append(weights)
            self.args.append(per_call)
        self.n_calls = len(spec["calls"])
        self.samples: list[list[float]] = [[] for _ in self.fns]
        self.consistent = True
        self.variant, self.call_index, self.seconds = 0, 0, 0.0

    def start(self, variant: int) -> None:
        self.variant, self.call_index, self.seconds = variant, 0, 0.0

    def call(self, own: Any, args: tuple) -> None:
        if self.call_index >= self.n_calls:  # more calls than the plan knows: timings of this kernel unusable
            self.consistent = False
            own(*args)
            return
        fn, replaced = self.fns[self.variant] or own, self.args[self.variant][self.call_index]
        call_args = [replaced.get(i, a) for i, a in enumerate(args)]
        start = time.perf_counter()
        fn(*call_args)
        self.seconds += time.perf_counter() - start
        self.call_index += 1

    def finish(self, keep: bool) -> None:
        self.consistent = self.consistent and self.call_index == self.n_calls
        if keep:
            self.samples[self.variant].append(self.seconds)


def time_models(model_paths: list[str], entry: str, io_path: str, n_rounds: int,
                min_round_ms: int) -> list[list[float]]:
    """Whole inferences of each model on the same inputs (TVM's timer on each VM), in interleaved rounds: per
    model, ``n_rounds`` samples of seconds per inference."""
    timers = []
    for path in model_paths:
        vm, inputs, dev = _model_vm(path, io_path)
        vm[entry](*inputs)  # warm-up
        timers.append(vm.time_evaluator(entry, dev, number=1, repeat=1, min_repeat_ms=min_round_ms))
    samples: list[list[float]] = [[] for _ in model_paths]
    for _ in range(n_rounds):
        for timer, out in zip(timers, samples, strict=True):
            timer(*inputs)  # settle after the other model
            out.append(timer(*inputs).mean)
    return samples
