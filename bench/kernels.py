"""Benchmark: every catalog workload, tuned by autosched and by MetaSchedule, next to numpy and PyTorch.

    python bench/kernels.py                       # the full run (1 thread, 64 trials, 5 seeds)
    python bench/kernels.py --workloads matmul --seeds 1 --trials 16 --skip-ms    # a quick look
    python bench/kernels.py --glue --threads 2 --trials 32 --out kernels_glue_t2     # memory-bound glue, in GB/s
    python bench/kernels.py --attention --threads 2 --trials 16 [--quick]         # fused attention vs matmul

One process, one thread count for everyone. For each workload and seed: autosched at N trials and
MetaSchedule ``tune_tir`` at its default settings and N trials, each tuner's whole wall time (its start-up
included). Then every tuned kernel (checked against the numpy reference first), the untuned build, numpy and
PyTorch (if installed) are timed in this process through the same kind of Python call, in interleaved
rounds; medians over rounds, then over seeds. Prints a table, writes bench/results/kernels.json.

``--glue``: the memory-bound kernels real models are glued with (a Swin window partition, an NCHW -> NHWC
transpose, attention heads split off, a UNet's broadcast multiply and skip concatenation, a softmax over 49-token
windows), each the fused task autosched extracts from a one-operator Relax graph: GB/s (its buffers' bytes over
its latency) of the untuned build, the rules' default (the space without the injective design), autosched's
default and its best after ``--trials`` of search, beside this machine's copy bandwidth at ``--threads``. Timed
with every call on its own copy of the buffers, enough copies to pass through 4x the last-level cache, so each
call reads from and writes to memory as a copy of a buffer that large does.

``--attention``: the fused attention (``graph/attention.py``) instead, for key counts 49 to 4096 and head dims 32 to
128, batch x heads chosen so that each kernel is a few ms: its default schedule and its schedule after a short
autosched tune, beside the same shape's batched matmul Q·Kᵀ tuned by autosched with as many trials, GFLOPS of each
(attention: its two products, 4 x pairs x queries x keys x head dim). Writes bench/results/kernels_attention.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, kernel_call, load_now, machine_info, time_interleaved, write_json  # noqa: E402

SHAPES = {
    "matmul": (512, 512, 512),
    "batch_matmul": (16, 128, 128, 64),
    "dense": (128, 768, 768),
    "conv2d": (1, 64, 56, 56, 64, 3, 3),
    "depthwise_conv2d": (1, 128, 56, 56, 3, 3),
    "softmax": (128, 768),
    "layer_norm": (128, 768),
    "elementwise": (128, 768),
    "gelu": (128, 3072),
    "gelu_tanh": (128, 3072),
    "bias_gelu": (128, 3072),
}


def torch_fn(op: str, inputs, shape):
    """The PyTorch equivalent of a catalog workload, or None."""
    try:
        import torch
    except ImportError:
        return None
    t = [torch.from_numpy(x) for x in inputs]
    F = torch.nn.functional
    full = shape
    fns = {
        "matmul": lambda: t[0] @ t[1],
        "batch_matmul": lambda: torch.bmm(t[0], t[1]),
        "dense": lambda: torch.relu(F.linear(t[0], t[1], t[2])),
        "conv2d": lambda: torch.relu(F.conv2d(t[0], t[1], t[2], stride=full[7], padding=full[8])),
        "depthwise_conv2d": lambda: F.conv2d(t[0], t[1], stride=full[6], padding=full[7], groups=full[1]),
        "softmax": lambda: torch.softmax(t[0], -1),
        "layer_norm": lambda: F.layer_norm(t[0], (full[1],), t[1], t[2], 1e-5),
        "elementwise": lambda: F.silu((t[0] + t[1]) * 1.702) / 1.702 * 0.5,
        "gelu": lambda: F.gelu(t[0]),
        "gelu_tanh": lambda: F.gelu(t[0], approximate="tanh"),
        "bias_gelu": lambda: F.gelu(t[0] + t[1], approximate="tanh"),
    }

    def run():
        with torch.no_grad():
            return fns[op]()

    return run


def measure_mod(session, task, mod, repeat: int = 5) -> float:
    """Build and time a scheduled module through autosched's runner (reference-checked): the runner's view,
    used where kernels of one tuner are compared with each other (bench/cost_model.py)."""
    from autosched._tvm import save_json
    from autosched.records import Candidate

    io = session.prepare_io(task)
    runner = session.runner
    old = runner.repeat
    runner.repeat = repeat
    try:
        res = runner.run(session.builder.build([Candidate(task.key, {}, mod_json=save_json(mod))]), io)[0]
    finally:
        runner.repeat = old
    if not res.ok:
        raise RuntimeError(f"{task.name}: {res.status.value} {res.error}")
    return res.latency_s


def run_metaschedule(task, n_trials: int, seed: int, return_curve: bool = False):
    from autosched._tvm import install_fast_inspect, ms

    work_dir = tempfile.mkdtemp(prefix="ms-")
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)  # its console handler copies this
    start = time.perf_counter()
    db = ms.tune_tir(
        task.mod, task.target, work_dir, max_trials_global=n_trials, num_trials_per_iter=min(32, n_trials),
        builder=ms.builder.LocalBuilder(max_workers=os.cpu_count(), timeout_sec=120, initializer=install_fast_inspect),
        runner=ms.runner.LocalRunner(timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(
            number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False)),
        cost_model="xgb", strategy="evolutionary", num_tuning_cores=os.cpu_count(), seed=seed)
    wall = time.perf_counter() - start
    n = len(db.get_all_tuning_records())
    sch = ms.tir_integration.compile_tir(db, task.mod, task.target)
    mod = sch.mod if sch is not None else None
    return (mod, wall, n, measurement_order(work_dir)) if return_curve else (mod, wall, n)


def measurement_order(work_dir: str) -> list[float]:
    """MetaSchedule's median latencies in the order it measured them (its JSON-lines record file is
    appended as it goes; ``get_all_tuning_records`` returns them sorted by speed)."""
    import json

    out = []
    with open(os.path.join(work_dir, "database_tuning_record.json")) as f:
        for line in f:
            run_secs = json.loads(line)[1][1]
            out.append(statistics.median(run_secs) if run_secs else float("inf"))
    return out


def bench_workload(op: str, seeds: list[int], args) -> dict:
    """Tune ``op`` with every seed (each tuner's whole wall time, its start-up included), then time every
    tuned kernel, the untuned build, numpy and PyTorch in this process through the same kind of Python call,
    interleaved rounds, medians; a tuned kernel is checked against the numpy reference before it is timed."""
    import numpy as np

    from autosched.apply import schedule_from_record
    from autosched.config import TuneConfig
    from autosched.db import MemoryDatabase
    from autosched.session import TuningSession
    from autosched.spaces.settings import settings_for
    from autosched.tasks import make_target, op_task
    from autosched.workloads import get_workload

    target = make_target("llvm", args.threads)
    shape = SHAPES[op]
    task = op_task(op, shape, target, settings_for(target).version)
    full = get_workload(op).normalise(shape)
    row: dict = {"workload": op, "shape": list(shape), "flops": task.flops, "seeds": seeds, "runs": []}
    cfg = TuneConfig(n_trials=args.trials, n_threads=args.threads)
    kernels = {"untuned": task.mod}
    for seed in seeds:
        run: dict = {"seed": seed, "load_before": load_now()}
        start = time.perf_counter()
        with TuningSession(cfg.replace(seed=seed), task.target_json) as session:
            result = session.tune(task, MemoryDatabase())
        run["autosched_tune_s"] = time.perf_counter() - start
        run["autosched_trials"] = result.n_new
        run["autosched_status_counts"] = {k.value: v for k, v in result.status_counts.items() if v}
        run["autosched_during_tuning_s"] = result.best_latency_s
        kernels[f"autosched/{seed}"] = schedule_from_record(task.mod, result.best).mod
        if not args.skip_ms:
            kernels[f"ms/{seed}"], run["ms_tune_s"], run["ms_trials"] = run_metaschedule(task, args.trials, seed)
        run["load_after"] = load_now()
        row["runs"].append(run)
        print(f"  {op} seed {seed}: autosched {run['autosched_tune_s']:.0f} s"
              + (f", MetaSchedule {run['ms_tune_s']:.0f} s" if "ms_tune_s" in run else ""), flush=True)
    times = time_side_by_side(task, kernels, torch_fn(op, task.random_inputs(0), full), args.repeat)
    for run in row["runs"]:
        for who in ("autosched", "ms"):
            run[f"{who}_s"] = times.get(f"{who}/{run['seed']}")
    for key in ("untuned", "numpy", "torch"):
        row[f"{key}_s"] = times.get(key)
    med = lambda key: statistics.median([r[key] for r in row["runs"] if r.get(key)]) if any(
        r.get(key) for r in row["runs"]) else None
    for key in ("autosched_s", "ms_s", "autosched_tune_s", "ms_tune_s"):
        row[key] = med(key)
    row["autosched_s_per_trial"] = statistics.median(r["autosched_tune_s"] / r["autosched_trials"]
                                                     for r in row["runs"])
    if not args.skip_ms:
        row["ms_s_per_trial"] = statistics.median(r["ms_tune_s"] / r["ms_trials"] for r in row["runs"])
    np.testing.assert_(row["autosched_s"] > 0)
    return row


def time_side_by_side(task, kernels: dict, torch_call, repeat: int) -> dict[str, float]:
    """Median seconds per call of every kernel (compiled here; wrong ones left out, with a line), numpy's
    reference and PyTorch, in interleaved rounds."""
    import numpy as np

    from autosched.measure.worker import _compare

    inputs = task.random_inputs(0)
    want = task.reference(inputs)
    out_specs = task.arg_specs()[-task.n_outputs:]
    calls = {}
    for name, mod in kernels.items():
        if mod is None:
            continue
        call, outs = kernel_call(mod, task.target, inputs, out_specs)
        call()
        errors = [_compare(o.numpy(), w, 1e-3, 1e-4) for o, w in zip(outs, want, strict=True)]
        if any(errors):
            print(f"  {name}: wrong result ({errors}), not timed", flush=True)
            continue
        calls[name] = call
    calls["numpy"] = lambda: task.reference(inputs)
    if torch_call is not None:
        got = np.asarray(torch_call())
        if np.allclose(got, want[0], rtol=1e-3, atol=1e-3 * np.abs(want[0]).max()):
            calls["torch"] = torch_call
        else:
            print(f"  torch: computes something else than the reference (max|err| "
                  f"{np.abs(got - want[0]).max():.3g}), not timed", flush=True)
    return {k: statistics.median(v) for k, v in time_interleaved(calls, repeat, min_round_s=0.05).items()}


def gflops(row, key):
    return row["flops"] / row[key] / 1e9 if row.get(key) else None


def print_table(rows: list[dict], args) -> dict:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Kernels, float32, {args.threads} thread(s), {args.trials} trials; GFLOPS (median of seeds)")
    cols = ["workload", "shape", "untuned", "autosched", "MetaSched", "numpy", "torch", "as/numpy", "as/MS",
            "as tune s", "MS tune s", "as s/trial", "MS s/trial"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("workload", "shape") else "right")
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
    wins, summary = 0, {}
    for r in rows:
        g = {k: gflops(r, k) for k in ("untuned_s", "autosched_s", "ms_s", "numpy_s", "torch_s")}
        r["ratio_to_numpy"] = r["numpy_s"] / r["autosched_s"]
        r["ratio_to_ms"] = r["ms_s"] / r["autosched_s"] if r.get("ms_s") else None
        wins += bool(r["ratio_to_ms"] and r["ratio_to_ms"] >= 0.8)
        table.add_row(r["workload"], "x".join(map(str, r["shape"])), f(g["untuned_s"]), f(g["autosched_s"]),
                      f(g["ms_s"]), f(g["numpy_s"]), f(g["torch_s"]), f(r["ratio_to_numpy"], 2),
                      f(r["ratio_to_ms"], 2), f(r["autosched_tune_s"], 0), f(r.get("ms_tune_s"), 0),
                      f(r["autosched_s_per_trial"], 2), f(r.get("ms_s_per_trial"), 2))
    Console(width=200).print(table)
    if not args.skip_ms:
        as_spt = statistics.median(r["autosched_s_per_trial"] for r in rows)
        ms_spt = statistics.median(r["ms_s_per_trial"] for r in rows)
        total = lambda who: (sum(x[f"{who}_tune_s"] for r in rows for x in r["runs"])
                             / sum(x[f"{who}_trials"] for r in rows for x in r["runs"]))
        summary = {"n_workloads_ge_0.8x_ms": wins, "n_workloads": len(rows),
                   "median_s_per_trial_autosched": as_spt, "median_s_per_trial_ms": ms_spt,
                   "s_per_trial_ratio": as_spt / ms_spt,
                   "overall_s_per_trial_autosched": total("autosched"), "overall_s_per_trial_ms": total("ms")}
        print(f"autosched >= 0.8x MetaSchedule on {wins}/{len(rows)} workloads (target >= 6/8); "
              f"seconds per trial (median of workloads) {as_spt:.2f} vs {ms_spt:.2f} = {as_spt / ms_spt:.2f}x, "
              f"overall {total('autosched'):.2f} vs {total('ms'):.2f} = {total('autosched') / total('ms'):.2f}x "
              f"(target <= 0.5)")
    mm = next((r for r in rows if r["workload"] == "matmul"), None)
    if mm:
        summary["matmul_ratio_to_numpy"] = mm["ratio_to_numpy"]
        print(f"matmul 512^3: autosched at {mm['ratio_to_numpy']:.2f}x numpy (target >= 0.70)")
    return summary


# --- memory-bound glue (--glue): GB/s against the copy bandwidth -------------------------------------------
GLUE = {  # name -> (input shapes, what the Relax graph does with them)
    "window_partition": ([(1, 56, 56, 96)], "reshape 1x8x7x8x7x96, transpose windows out, reshape 64x49x96"),
    "nchw_to_nhwc": ([(2, 320, 64, 64)], "transpose (0, 2, 3, 1)"),
    "split_heads": ([(1, 197, 768)], "reshape 1x197x12x64, transpose (0, 2, 1, 3)"),
    "broadcast_multiply": ([(2, 320, 64, 64), (2, 320, 1, 1)], "multiply"),
    "concat": ([(2, 640, 32, 32), (2, 320, 32, 32)], "concatenate along axis 1"),
    "softmax_49": ([(64, 3, 49, 49)], "softmax along the last axis"),
}
STREAM_BYTES = 4 * (32 << 20)  # the buffers' copies of a timed kernel pass through this much memory (4x the L3)


def glue_graph(name: str):
    """The one-operator Relax module of a ``GLUE`` row."""
    from autosched._tvm import relax

    shapes, _ = GLUE[name]
    op, bb = relax.op, relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            x = xs[0]
            if name == "window_partition":
                x = bb.emit(op.permute_dims(bb.emit(op.reshape(x, (1, 8, 7, 8, 7, 96))), (0, 1, 3, 2, 4, 5)))
                out = op.reshape(x, (64, 49, 96))
            elif name == "split_heads":
                out = op.permute_dims(bb.emit(op.reshape(x, (1, 197, 12, 64))), (0, 2, 1, 3))
            else:
                out = {"nchw_to_nhwc": lambda: op.permute_dims(x, (0, 2, 3, 1)),
                       "broadcast_multiply": lambda: op.multiply(x, xs[1]), "concat": lambda: op.concat(xs, axis=1),
                       "softmax_49": lambda: op.nn.softmax(x, axis=-1)}[name]()
            result = bb.emit_output(out)
        bb.emit_func_output(result)
    return bb.get()


def glue_task(name: str, target):
    """The task autosched extracts from the row's graph (the one moving the most bytes, where there are more)."""
    from autosched.graph.passes import extract_tasks, rewrite
    from autosched.spaces.settings import settings_for

    tasks = extract_tasks(rewrite(glue_graph(name), target), target, settings_for(target).version)
    return max(tasks, key=lambda t: t.n_bytes)


def glue_kernels(task, args) -> tuple[dict, dict]:
    """The kernels of a row (untuned, the rules' default, autosched's default, its best after ``args.trials``) and
    what the search did."""
    import dataclasses

    from autosched.apply import schedule_from_record
    from autosched.config import TuneConfig
    from autosched.db import MemoryDatabase
    from autosched.session import TuningSession
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace

    settings = settings_for(task.target)
    rules = TraceSearchSpace(task.mod, task.target, dataclasses.replace(settings, stream_injective=False))
    space = TraceSearchSpace(task.mod, task.target, settings)
    params, default = space.default_schedule()
    kernels = {"untuned": task.mod, "rules_default": rules.default_schedule()[1].mod, "default": default.mod}
    start = time.perf_counter()
    with TuningSession(TuneConfig(n_trials=args.trials, n_threads=args.threads), task.target_json) as session:
        result = session.tune(task, MemoryDatabase())
    kernels["searched"] = schedule_from_record(task.mod, result.best).mod
    return kernels, {"default_design": params["design"], "tune_s": time.perf_counter() - start,
                     "trials": result.n_new, "best_design": result.best.params.get("design")}


def time_streaming(task, kernels: dict, repeat: int, threads: int) -> dict[str, float]:
    """Median seconds per call of each kernel (checked against the untuned build first), each call on the next of
    enough copies of the buffers to stream ``STREAM_BYTES``, and of a copy of as many bytes ("copy"), interleaved
    rounds."""
    import itertools

    import numpy as np

    from autosched._tvm import cpu_device, tvm

    dev, specs = cpu_device(), task.arg_specs()
    inputs = task.random_inputs(0)
    n_copies = max(1, -(-STREAM_BYTES // task.n_bytes))
    copies = [[tvm.runtime.tensor(a, dev) for a in inputs] + [tvm.runtime.empty(s, d, dev) for s, d in
                                                              specs[len(inputs):]] for _ in range(n_copies)]
    want, calls = None, {}
    for name, mod in kernels.items():
        fn = tvm.compile(mod, target=task.target)["main"]
        fn(*copies[0])
        got = [t.numpy() for t in copies[0][len(inputs):]]
        want = want if want is not None else got
        if not all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want, strict=True)):
            print(f"  {name}: wrong result, not timed", flush=True)
            continue
        turn = itertools.cycle(copies)
        calls[name] = lambda fn=fn, turn=turn: fn(*next(turn))
    with ThreadPoolExecutor(threads) as pool:
        calls["copy"] = _copy_call(task.n_bytes, n_copies, pool, threads)
        return {k: statistics.median(v) for k, v in time_interleaved(calls, repeat, min_round_s=0.05).items()}


def _copy_call(n_bytes: int, n_copies: int, pool, threads: int):
    """A threaded copy moving ``n_bytes`` (half read, half written), on the next of ``n_copies`` buffer pairs each
    call: the copy bandwidth at this moment, on buffers as the kernels' (``autosched.bandwidth.copy_bandwidth``)."""
    import itertools

    import numpy as np

    from autosched.bandwidth import timed_copy

    pairs = [(np.ones(n_bytes // 8, np.float32), np.ones(n_bytes // 8, np.float32)) for _ in range(n_copies)]
    turn = itertools.cycle(pairs)
    return lambda: timed_copy(*next(turn), pool, threads)


def bench_glue(name: str, args, copy_Bps: float) -> dict:
    from autosched.tasks import make_target

    task = glue_task(name, make_target("llvm", args.threads))
    kernels, tuning = glue_kernels(task, args)
    times = time_streaming(task, kernels, args.repeat, args.threads)
    copy_s = times.pop("copy")
    row = {"workload": name, "shapes": GLUE[name][0], "graph": GLUE[name][1], "task": task.name,
           "pattern": task.info.get("pattern"), "bytes": task.n_bytes, **tuning, "copy_gbps": copy_Bps / 1e9,
           "copy_here_s": copy_s, "copy_here_gbps": task.n_bytes / copy_s / 1e9}
    for key, seconds in times.items():
        row[f"{key}_s"], row[f"{key}_gbps"] = seconds, task.n_bytes / seconds / 1e9
    best = min((k for k in ("default", "searched") if k in times), key=times.get)  # compile takes the faster
    row["tuned_s"], row["tuned_gbps"] = times[best], task.n_bytes / times[best] / 1e9
    print(f"  {name}: {task.name}, {task.n_bytes / 1e6:.1f} MB, " + ", ".join(
        f"{k} {row[f'{k}_gbps']:.1f} GB/s" for k in (*times, "tuned", "copy_here")), flush=True)
    return row


def print_glue_table(rows: list[dict], args) -> None:
    from rich.console import Console
    from rich.table import Table

    copy = rows[0]["copy_gbps"] if rows else float("nan")
    table = Table(title=f"Memory-bound glue, float32, {args.threads} thread(s), {args.trials} trials: GB/s (buffers' "
                        f"bytes over latency); copy: a copy of as many bytes timed among them (copy bandwidth "
                        f"{copy:.1f} GB/s)")
    cols = ["workload", "task", "MB", "untuned", "rules' default", "default", "searched", "tuned", "copy",
            "default/copy", "tuned/copy", "default/rules'"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("workload", "task") else "right")
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in rows:
        g = {k: r.get(f"{k}_gbps") for k in ("untuned", "rules_default", "default", "searched", "tuned")}
        here = r["copy_here_gbps"]
        table.add_row(r["workload"], r["task"], f(r["bytes"] / 1e6), *(f(g[k]) for k in g), f(here),
                      f"{g['default'] / here:.0%}" if g["default"] else "-", f"{g['tuned'] / here:.0%}",
                      f(g["default"] / g["rules_default"], 2) + "x" if g["default"] and g["rules_default"] else "-")
    Console(width=200).print(table)


def run_glue(args) -> None:
    """The ``--glue`` rows: every workload of ``GLUE`` (or of ``--workloads``), one tuning run each."""
    from autosched.bandwidth import copy_bandwidth

    info = machine_info()
    print(f"machine: {info}", flush=True)
    copy_Bps = copy_bandwidth(args.threads)
    rows: list[dict] = []
    payload = {"machine": info, "args": vars(args), "copy_gbps": copy_Bps / 1e9, "rows": rows}
    for name in (args.workloads.split(",") if args.workloads else list(GLUE)):
        rows.append(bench_glue(name, args, copy_Bps))
        write_json(args.out, payload)
    print_glue_table(rows, args)
    print(f"wrote {write_json(args.out, payload)}")


# --- fused attention against matmul (--attention) ---------------------------------------------------------------
ATTENTION_KEYS, ATTENTION_DEPTHS = (49, 256, 1024, 1500, 4096), (32, 64, 128)
ATTENTION_QUICK = ((49, 32), (256, 64), (1500, 64), (4096, 64))
ATTENTION_HEADS = 4
ATTENTION_FLOPS = 1.0e9  # per kernel call: a few ms at matmul speed on two cores


def attention_shapes(quick: bool) -> list[tuple[int, int, int, int, int]]:
    """(batch, heads, queries, keys, head dim) per benchmarked attention: self-attention where 4 heads of it fit
    ``ATTENTION_FLOPS``, fewer queries (a power of 2) where they do not; the batch (windows) fills the rest."""
    pairs = ATTENTION_QUICK if quick else [(k, d) for k in ATTENTION_KEYS for d in ATTENTION_DEPTHS]
    out = []
    for n_k, depth in pairs:
        per_query = 4.0 * ATTENTION_HEADS * n_k * depth
        fits = max(int(ATTENTION_FLOPS / per_query), 64)
        n_q = n_k if per_query * n_k <= 2 * ATTENTION_FLOPS else 1 << fits.bit_length() - 1
        batch = max(1, round(ATTENTION_FLOPS / (per_query * n_q)))
        out.append((batch, ATTENTION_HEADS, n_q, n_k, depth))
    return out


def attention_task(shape: tuple[int, int, int, int, int], target):
    """The fused attention of ``shape`` (scale 1/sqrt(d), no mask) as a task with its numpy reference."""
    import numpy as np

    from autosched._tvm import IRModule
    from autosched.graph.attention import attention_func
    from autosched.spaces.settings import settings_for
    from autosched.tasks import Task

    batch, heads, n_q, n_k, depth = shape
    lead, scale = (batch, heads), depth ** -0.5
    func = attention_func((*lead, n_q, depth), (*lead, depth, n_k), (*lead, n_k, depth), None, scale, False, False)

    def reference(inputs):
        q, kt, v = inputs
        logits = q @ kt * np.float32(scale)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        return [(p / p.sum(-1, keepdims=True)) @ v]

    return Task(f"attention_{'x'.join(map(str, shape))}", IRModule({"main": func.with_attr("global_symbol", "main")}),
                target, settings_for(target).version, 4.0 * batch * heads * n_q * n_k * depth, reference=reference)


def tuned_kernel(task, args):
    """The task's best schedule after ``args.trials`` autosched trials (seed 0) starting from the task's default
    schedule (as a model's tune does: its defaults phase), None where none measured right, and the tune's wall
    seconds."""
    from autosched.apply import schedule_from_record
    from autosched.config import TuneConfig
    from autosched.db import MemoryDatabase
    from autosched.session import TuningSession

    start = time.perf_counter()
    with TuningSession(TuneConfig(n_trials=args.trials, n_threads=args.threads, seed=0), task.target_json) as session:
        db = MemoryDatabase()
        strategy = session.strategy(task, db)
        strategy.propose(strategy.space.default_schedule()[0])
        result = session.tune(task, db, strategy=strategy)
    best = None if result.best is None else schedule_from_record(task.mod, result.best).mod
    return best, time.perf_counter() - start


def bench_attention_shape(shape: tuple[int, int, int, int, int], args) -> dict:
    """GFLOPS of the fused attention (default schedule, tuned) and of its Q·Kᵀ as a tuned batched matmul, timed in
    interleaved rounds after a check against numpy."""
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target, op_task

    target = make_target("llvm", args.threads)
    batch, heads, n_q, n_k, depth = shape
    fused = attention_task(shape, target)
    scores = op_task("batch_matmul", (batch * heads, n_q, n_k, depth), target, settings_for(target).version)
    space = TraceSearchSpace(fused.mod, target, settings_for(target))
    fused_mod, fused_tune_s = tuned_kernel(fused, args)
    qk_mod, qk_tune_s = tuned_kernel(scores, args)
    kernels = {"fused default": (fused, space.default_schedule()[1].mod), "fused tuned": (fused, fused_mod),
               "matmul QK tuned": (scores, qk_mod)}
    seconds = time_kernels(kernels, args.repeat)
    row = {"shape": {"batch": batch, "heads": heads, "queries": n_q, "keys": n_k, "head_dim": depth},
           "trials": args.trials, "fused_tune_s": fused_tune_s, "matmul_tune_s": qk_tune_s, "load": load_now()}
    for name, (task, _) in kernels.items():
        key = name.replace(" ", "_")
        row[f"{key}_s"] = seconds.get(name)
        row[f"{key}_gflops"] = task.flops / seconds[name] / 1e9 if seconds.get(name) else None
    print(f"  attention {'x'.join(map(str, shape))}: " + ", ".join(
        f"{name} {row[name.replace(' ', '_') + '_gflops'] or 0:.0f}" for name in kernels) + " GFLOPS", flush=True)
    return row


def time_kernels(kernels: dict, repeat: int) -> dict[str, float]:
    """Median seconds per call of each (task, module), each checked against its task's reference first (a wrong
    one is left out, with a line)."""
    from autosched.measure.worker import _compare

    calls = {}
    for name, (task, mod) in kernels.items():
        if mod is None:
            continue
        inputs = task.random_inputs(0)
        call, outs = kernel_call(mod, task.target, inputs, task.arg_specs()[-task.n_outputs:])
        call()
        errors = [_compare(o.numpy(), w, 1e-3, 1e-4) for o, w in zip(outs, task.reference(inputs), strict=True)]
        if any(errors):
            print(f"  {name}: wrong result ({errors}), not timed", flush=True)
            continue
        calls[name] = call
    return {k: statistics.median(v) for k, v in time_interleaved(calls, repeat, min_round_s=0.05).items()}


def print_attention_table(rows: list[dict], args) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Fused attention, float32, {args.threads} thread(s), {args.trials} trials; GFLOPS")
    for c in ("batch x heads", "queries", "keys", "head dim", "fused default", "fused tuned", "matmul QK tuned",
              "fused / matmul"):
        table.add_column(c, justify="right")
    f = lambda v, p=0: "-" if v is None else f"{v:.{p}f}"
    for r in rows:
        s, ratio = r["shape"], None
        if r.get("fused_tuned_gflops") and r.get("matmul_QK_tuned_gflops"):
            ratio = r["fused_tuned_gflops"] / r["matmul_QK_tuned_gflops"]
        table.add_row(f"{s['batch']}x{s['heads']}", str(s["queries"]), str(s["keys"]), str(s["head_dim"]),
                      f(r["fused_default_gflops"]), f(r["fused_tuned_gflops"]), f(r["matmul_QK_tuned_gflops"]),
                      f(ratio, 2))
    Console(width=160).print(table)


def run_attention(args) -> None:
    info = machine_info()
    print(f"machine: {info}", flush=True)
    name = args.out if args.out != "kernels" else "kernels_attention"
    rows = []
    for shape in attention_shapes(args.quick):
        rows.append(bench_attention_shape(shape, args))
        write_json(name, {"machine": info, "args": vars(args), "rows": rows})
    print_attention_table(rows, args)
    print(f"wrote {write_json(name, {'machine': info, 'args': vars(args), 'rows': rows})}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=None, help=f"default: {','.join(SHAPES)} (with --glue: {','.join(GLUE)})")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seeds", type=int, default=5, help="tuning runs per workload and tuner (medians reported)")
    p.add_argument("--repeat", type=int, default=7, help="interleaved timing rounds of the tuned kernels")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-ms", action="store_true", help="leave MetaSchedule out (quick runs)")
    p.add_argument("--out", default="kernels")
    p.add_argument("--glue", action="store_true", help="the memory-bound glue rows instead, in GB/s (GLUE)")
    p.add_argument("--attention", action="store_true", help="the fused attention section instead of the workloads")
    p.add_argument("--quick", action="store_true", help="with --attention: 4 of its 15 shapes")
    args = p.parse_args()
    fair_environment(args.threads)
    if args.glue:
        logging.basicConfig(level=logging.WARNING)
        return run_glue(args)
    args.workloads = args.workloads or ",".join(SHAPES)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    from threadpoolctl import threadpool_limits

    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    if args.attention:
        with threadpool_limits(args.threads):
            return run_attention(args)
    info = machine_info()
    print(f"machine: {info}", flush=True)
    rows = []
    with threadpool_limits(args.threads):
        for op in args.workloads.split(","):
            seeds = list(range(args.seeds))
            rows.append(bench_workload(op, seeds, args))
            write_json(args.out, {"machine": info, "args": vars(args), "rows": rows})
        summary = print_table(rows, args)
    path = write_json(args.out, {"machine": info, "args": vars(args), "rows": rows, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
