"""GPU check: autosched's tuned CUDA kernels against PyTorch (cuBLAS / cuDNN) on this machine's NVIDIA GPU.

    python bench/gpu_check.py                      # on a machine with an NVIDIA GPU: about 8 minutes
    python bench/gpu_check.py --target llvm --small --budget-s 90  # the same steps on this CPU, small shapes

Six kernels, each tuned for its share of ``--budget-s`` (whole tuning time, setup included), then timed beside
PyTorch at its default settings through the same kind of call (one Python call on arguments already on the
device, followed by a device synchronisation), rounds interleaved, median of the rounds:

* matmul 4096^3 in float32 (the catalog's matmul; PyTorch: ``torch.matmul``, TF32 off as by default),
* matmul 4096^3 in float16, accumulated in float16 (a TE compute; tensor-core designs in the space),
* matmul 4096^3 in float16 and in bfloat16, accumulated in float32 and rounded to the input type (as cuBLAS),
* a ResNet-50 3x3 convolution with bias and ReLU (catalog conv2d, NCHW; PyTorch: cuDNN), and the same
  convolution in float16 channels-last (NHWC input, OHWI weights; PyTorch: cuDNN on channels-last views),
* the models (``--models``; default ResNet-50 and BERT-base from the corpus: whole model, tuned fusion groups,
  the rest on dlight's schedules), beside PyTorch eager and ``torch.compile`` (Inductor).

Every tuned result is checked against PyTorch's output before it is timed. Prints a table and writes
``bench/results/gpu_check.json`` (``--out`` to change the name). The issue's bar: fp32 matmul >= 50% of PyTorch's
speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import time_interleaved, write_json  # noqa: E402

FULL = {"matmul": (4096, 4096, 4096), "conv2d": (1, 256, 14, 14, 256, 3, 3),
        "models": ("corpus:resnet50", "corpus:bert")}  # the issue's pair: ResNet-50 and BERT-base (seq 128)
SMALL = {"matmul": (256, 256, 256), "conv2d": (1, 32, 14, 14, 32, 3, 3), "models": ("tiny_cnn",)}
SHARES = {"matmul_fp32": 0.12, "matmul_fp16": 0.08, "matmul_fp16_f32acc": 0.1, "matmul_bf16": 0.1, "conv2d": 0.1,
          "conv2d_fp16": 0.1, "model": 0.4}  # of --budget-s (default)
MIN_TRIALS = 8  # measurements per kernel even past its share of the budget
FP16_TOLERANCE = 2e-2  # float16 accumulation over K=4096 terms, relative to the largest output
# float32 accumulation rounded to float16 or bfloat16 (8 bits of mantissa: 0.4 % of an element)
LOW_PRECISION = {"rtol": FP16_TOLERANCE, "atol": FP16_TOLERANCE}


@dataclass
class Row:
    case: str
    shape: str
    gflop: float | None
    tune_s: float
    n_measured: int
    untuned_ms: float | None  # TVM's default GPU schedule (dlight), the tuner's baseline
    autosched_ms: float | None
    torch_ms: float | None
    max_rel_err: float | None
    graph_ms: float | None = None  # the model built with CUDA graphs (autosched.deploy.build's cuda_graph)
    torch_compile_ms: float | None = None  # the model through torch.compile at its defaults (Inductor)
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def speed_vs_torch(self) -> float | None:  # > 1: autosched faster
        return self.torch_ms / self.autosched_ms if self.torch_ms and self.autosched_ms else None


# --- devices --------------------------------------------------------------------------------------------------
class Devices:
    """The TVM device and PyTorch device of the target, and how to wait for each."""

    def __init__(self, target):
        import torch

        from autosched._tvm import tvm
        from autosched.targets import device_kind

        self.kind = device_kind(target)
        self.tvm = tvm.device(self.kind, 0)
        self.torch = torch.device("cuda" if self.kind == "cuda" else "cpu")
        self.torch_ok = self.kind == "cpu" or torch.cuda.is_available()

    def sync_tvm(self) -> None:
        self.tvm.sync()

    def sync_torch(self) -> None:
        import torch

        if self.torch.type == "cuda":
            torch.cuda.synchronize()

    def tensors(self, arrays, out_specs):
        from autosched._tvm import tvm

        return ([tvm.runtime.tensor(a, self.tvm) for a in arrays]
                + [tvm.runtime.empty(s, d, self.tvm) for s, d in out_specs])


def max_rel_err(got, want) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def outcome_notes(db, task_key: str | None = None) -> list[str]:
    """How the measured candidates ended (``OK: 52``, the three commonest failures with their first words): a
    case that found nothing says why."""
    from collections import Counter

    records = db.records(task_key)
    notes = [", ".join(f"{s}: {n}" for s, n in Counter(r.status.name for r in records).most_common())]
    failed = Counter(f"{r.status.name} {(r.error or '').strip()[:160]}" for r in records if r.status.name != "OK")
    return notes + [f"{n} x {e}" for e, n in failed.most_common(3)]


def time_pair(calls: dict, repeat: int) -> dict[str, float]:
    import statistics

    samples = time_interleaved(calls, repeat=repeat, min_round_s=0.2)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


# --- one kernel -----------------------------------------------------------------------------------------------
def tune_kernel(task, seconds: float, work: Path, config_kw: dict, min_trials: int = MIN_TRIALS
                ) -> tuple[object, float, int, float | None]:
    """Tune ``task`` for ``seconds`` (baseline included, and longer if that gave fewer than ``min_trials``
    measurements); returns (database, tuning seconds, measurements, untuned ms)."""
    from autosched.config import TuneConfig
    from autosched.db import open_database
    from autosched.session import TuningSession
    from autosched.tune import Deadline

    start = time.perf_counter()
    db = open_database(str(work / f"{task.name}.db"))
    config = TuneConfig(seed=0, **config_kw)
    deadline = Deadline.after(seconds)
    with TuningSession(config, task.target_json) as session:
        base = session.measure_unscheduled(task)
        result = session.tune(task, db, n_trials=100_000, deadline=deadline)
        if result.n_measured < min_trials:  # a loaded machine or a tiny share: still enough to compare
            result = session.tune(task, db, n_trials=min_trials)
    untuned_ms = base.latency_s * 1e3 if base.latency_s < float("inf") else None
    return db, time.perf_counter() - start, result.n_measured, untuned_ms


def kernel_case(name: str, task, inputs, torch_call, seconds: float, dev: Devices, work: Path, repeat: int,
                config_kw: dict) -> Row:
    """Tune a task, rebuild its best schedule, check it against PyTorch's output and time both."""

    from autosched._tvm import tvm
    from autosched.api import best_module

    db, tune_s, n, untuned_ms = tune_kernel(task, seconds, work, config_kw)
    row = Row(name, "x".join(map(str, task.info.get("shape", ()))) or task.name, task.flops / 1e9, tune_s, n,
              untuned_ms, None, None, None)
    row.notes = outcome_notes(db, task.key)
    best = db.best(task.key, task.target_json)
    if best is None:
        row.error = "no valid measurement in the budget"
        return row
    function = tvm.compile(best_module(db, task.key), target=task.target)["main"]
    out_spec = task.arg_specs()[-1]
    args = dev.tensors(inputs, [out_spec])
    t_args = [torch_tensor(a, dev) for a in inputs]
    want = torch_call(*t_args)
    function(*args)
    row.max_rel_err = max_rel_err(args[-1].numpy().astype("float32"), want.float().cpu().numpy())

    def ours():
        function(*args)
        dev.sync_tvm()

    def theirs():
        torch_call(*t_args)
        dev.sync_torch()

    times = time_pair({"autosched": ours, "torch": theirs}, repeat)
    row.autosched_ms, row.torch_ms = times["autosched"], times["torch"]
    return row


def torch_tensor(array, dev: Devices):
    """A numpy array on PyTorch's device (bfloat16, which numpy holds through ml_dtypes, by its bits)."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view("uint16")).view(torch.bfloat16).to(dev.torch)
    return torch.from_numpy(array).to(dev.torch)


def matmul_fp16_task(m: int, n: int, k: int, target):
    """float16 in, float16 out, float16 accumulation (tensor-core designs apply); checked against numpy."""
    import numpy as np

    from autosched._tvm import IRModule, te
    from autosched.spaces.settings import settings_for
    from autosched.tasks import primfunc_task

    a, b = te.placeholder((m, k), "float16", name="A"), te.placeholder((k, n), "float16", name="B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    task = primfunc_task("matmul_fp16", IRModule({"main": te.create_prim_func([a, b, c])}), target,
                         settings_for(target).version)
    task.reference = lambda ins: [(ins[0].astype(np.float32) @ ins[1].astype(np.float32)).astype(np.float16)]
    task.info["shape"] = (m, n, k)
    return task


def matmul_fp16_f32acc_task(m: int, n: int, k: int, target):
    """float16 in, float32 accumulation, float16 out (as cuBLAS's float16 GEMM, and as autosched's ``--precision
    fp16`` rewrite asks); checked against numpy in float32."""
    return lowp_matmul_task("float16", m, n, k, target)


def lowp_matmul_task(dtype: str, m: int, n: int, k: int, target):
    """``dtype`` (float16 or bfloat16) in and out, accumulated in float32: tensor-core designs with float32
    accumulation (bfloat16: the wmma group autosched registers)."""
    import numpy as np

    from autosched._tvm import IRModule, te
    from autosched.spaces.settings import settings_for
    from autosched.tasks import primfunc_task

    a, b = te.placeholder((m, k), dtype, name="A"), te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), "k")
    acc = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r),
                     name="C")
    c = te.compute((m, n), lambda i, j: acc[i, j].astype(dtype), name="C_cast")
    name = {"float16": "matmul_fp16_f32acc", "bfloat16": "matmul_bf16"}[dtype]
    task = primfunc_task(name, IRModule({"main": te.create_prim_func([a, b, c])}), target,
                         settings_for(target).version)
    task.reference = lambda ins: [(ins[0].astype(np.float32) @ ins[1].astype(np.float32)).astype(ins[0].dtype)]
    task.info["shape"] = (m, n, k)
    return task


def conv2d_fp16_task(shape: tuple, target):
    """The catalog convolution's shape (batch, in channels, size, size, out channels, kernel, kernel) in float16,
    channels last (NHWC input, OHWI weights: what cuDNN takes fastest), accumulated in float32, float16 out."""
    import numpy as np

    from autosched._tvm import IRModule, te
    from autosched.spaces.settings import settings_for
    from autosched.tasks import primfunc_task

    n, c, h, w, o, kh, kw = shape
    ph, pw = (kh - 1) // 2, (kw - 1) // 2
    x, wt = te.placeholder((n, h, w, c), "float16", name="X"), te.placeholder((o, kh, kw, c), "float16", name="W")
    zero = te.const(0, "float16")
    xp = te.compute((n, h + 2 * ph, w + 2 * pw, c), lambda b, y, z, i: te.if_then_else(
        te.all(y >= ph, y < h + ph, z >= pw, z < w + pw), x[b, y - ph, z - pw, i], zero), name="pad")
    ry, rz, ri = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rz"), te.reduce_axis((0, c), "ri")
    acc = te.compute((n, h, w, o), lambda b, y, z, j: te.sum(
        xp[b, y + ry, z + rz, ri].astype("float32") * wt[j, ry, rz, ri].astype("float32"), axis=[ry, rz, ri]),
        name="conv")
    out = te.compute((n, h, w, o), lambda *i: acc(*i).astype("float16"), name="conv_cast")
    task = primfunc_task("conv2d_fp16", IRModule({"main": te.create_prim_func([x, wt, out])}), target,
                         settings_for(target).version)

    def reference(ins):
        xs = np.pad(ins[0].astype(np.float32), ((0, 0), (ph, ph), (pw, pw), (0, 0)))
        win = np.lib.stride_tricks.sliding_window_view(xs, (kh, kw), axis=(1, 2))  # n, h, w, c, kh, kw
        return [np.einsum("nhwcyz,oyzc->nhwo", win, ins[1].astype(np.float32)).astype(np.float16)]

    task.reference = reference
    task.info["shape"] = shape
    return task


def shares(model_share: float) -> dict[str, float]:
    """Each case's share of the budget: ``model_share`` for the model, the rest split as in ``SHARES``."""
    scale = (1.0 - model_share) / (1.0 - SHARES["model"])
    return {**{k: v * scale for k, v in SHARES.items() if k != "model"}, "model": model_share}


def kernel_rows(target, shapes: dict, budget_s: float, dev: Devices, work: Path, repeat: int,
                share: dict[str, float] = SHARES) -> list[Row]:
    import torch
    import torch.nn.functional as F

    from autosched.spaces.settings import settings_for
    from autosched.tasks import op_task

    version = settings_for(target).version
    rows = []
    mm = op_task("matmul", shapes["matmul"], target, version)
    mm.info["shape"] = shapes["matmul"]
    cases = [
        ("matmul_fp32", mm, lambda a, b: torch.matmul(a, b), {}),
        ("matmul_fp16", matmul_fp16_task(*shapes["matmul"], target), lambda a, b: torch.matmul(a, b),
         {"rtol": FP16_TOLERANCE, "atol": FP16_TOLERANCE}),
        # PyTorch's float16 matmul accumulates in float32 too (cuBLAS), returning float16: compared in float32
        # PyTorch's float16 and bfloat16 matmuls accumulate in float32 too (cuBLAS) and return their input type
        ("matmul_fp16_f32acc", matmul_fp16_f32acc_task(*shapes["matmul"], target), lambda a, b: torch.matmul(a, b),
         LOW_PRECISION),
        ("matmul_bf16", lowp_matmul_task("bfloat16", *shapes["matmul"], target), lambda a, b: torch.matmul(a, b),
         LOW_PRECISION),
    ]
    conv = op_task("conv2d", shapes["conv2d"], target, version)
    conv.info["shape"] = shapes["conv2d"]
    pad = (shapes["conv2d"][5] - 1) // 2
    cases.append(("conv2d", conv, lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=pad)), {}))
    # channels last: NHWC and OHWI arrays seen as NCHW / OIHW views (no copy); the output seen back as NHWC
    cases.append(("conv2d_fp16", conv2d_fp16_task(shapes["conv2d"], target),
                  lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), padding=pad).permute(0, 2, 3, 1),
                  LOW_PRECISION))
    for name, task, call, kw in cases:
        inputs = task.random_inputs(0)
        print(f"[{name}] tuning {task.name} for {budget_s * share[name]:.0f} s ...", flush=True)
        try:
            with torch.no_grad():
                rows.append(kernel_case(name, task, inputs, call, budget_s * share[name], dev, work, repeat, kw))
        except Exception as err:  # noqa: BLE001 - one failed case is reported, the others still run
            rows.append(Row(name, task.name, task.flops / 1e9, 0.0, 0, None, None, None, None,
                            error=f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"))
        print(f"[{name}] {rows[-1]}", flush=True)
    return rows


# --- one model ------------------------------------------------------------------------------------------------
def corpus_or_zoo(name: str):
    """(module, example inputs) of ``corpus:NAME[@small]`` (the model corpus: ResNet-50, BERT-base, GPT-2, ...; one
    input) or of a built-in model."""
    from autosched.corpus import catalog, zoo

    if name.startswith("corpus:"):
        corpus_name, _, size = name.removeprefix("corpus:").partition("@")
        return catalog.build_module(corpus_name, size or "full")
    return zoo.build(name)


def model_row(name: str, target, seconds: float, dev: Devices, work: Path, repeat: int,
              torch_compile: bool = True) -> Row:
    """Tune the built-in model ``name`` for ``seconds``, compile it, check it against PyTorch (eager and, with
    ``torch_compile``, ``torch.compile``), time them in interleaved rounds."""
    import torch

    from autosched import api
    from autosched.config import TuneConfig
    from autosched.db import open_database
    from autosched.deploy.profiling import profile

    module, example = corpus_or_zoo(name)
    model = api.load_model(module, example_inputs=example, name=name.replace(":", "_").replace("@", "_"))
    start = time.perf_counter()
    result = api.tune_model(model, target, db=str(work / f"{name}.db"),
                            config=TuneConfig(seed=0, n_trials=0, time_budget_s=seconds))
    tune_s = time.perf_counter() - start
    compiled = api.compile(model, target, db=str(work / f"{name}.db"))
    graphed = api.compile(model, target, db=str(work / f"{name}.db"), cuda_graph=True) if dev.kind == "cuda" \
        else None
    outcomes = outcome_notes(open_database(str(work / f"{name}.db")))
    row = Row(name, "x".join(map(str, example[0].shape)), None, tune_s, len(result.states) + result.n_new,
              result.untuned_s * 1e3, None, None, None,
              notes=[f"tasks {result.n_tasks}, fusion groups {dict(compiled.counts())}",
                     f"estimated from the tasks' best: {result.estimated_s * 1e3:.3f} ms", *outcomes])
    xs = [e.numpy() for e in example]
    module = module.to(dev.torch)
    t_xs = [e.to(dev.torch) for e in example]
    with torch.no_grad():
        want = first_output(module(*t_xs)).cpu().numpy()
        row.max_rel_err = max_rel_err(compiled(*xs)[0], want)
        args = dev.tensors(xs, [])
        calls = {"autosched": timed_call(compiled.function, args, dev.sync_tvm)}
        if graphed is not None:
            row.max_rel_err = max(row.max_rel_err, max_rel_err(graphed(*xs)[0], want))
            calls["cuda_graph"] = timed_call(graphed.function, args, dev.sync_tvm)

        def theirs():
            module(*t_xs)
            dev.sync_torch()

        calls["torch"] = theirs
        if torch_compile:  # Inductor at its defaults; its first call (the compile) is not timed
            calls.update(inductor_call(module, t_xs, want, row, dev))
        times = time_pair(calls, repeat)
    row.autosched_ms, row.torch_ms, row.graph_ms = times["autosched"], times["torch"], times.get("cuda_graph")
    row.torch_compile_ms = times.get("torch_compile")
    if row.torch_compile_ms is not None:
        row.notes.append(f"torch.compile (Inductor, defaults): {row.torch_compile_ms:.3f} ms "
                         f"({row.torch_compile_ms / row.autosched_ms:.2f} vs autosched)")
    if row.graph_ms is not None:
        row.notes.append(f"with CUDA graphs: {row.graph_ms:.3f} ms ({row.torch_ms / row.graph_ms:.2f} vs torch)")
    row.notes += ["per call (VM instrument hook, device synchronised around each call):",
                  *profile(compiled, xs).table(top=14).splitlines()]
    return row


def first_output(out):
    """A module's first output tensor (a Hugging Face model returns an output object: its last hidden state), the
    one the compiled model's first output is."""
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return out[0] if isinstance(out, (tuple, list)) else out


def inductor_call(module, t_xs, want, row: Row, dev: Devices) -> dict:
    """``{"torch_compile": call}`` for the module through ``torch.compile`` (checked against eager's ``want``), or
    nothing with a note where Inductor cannot compile it here (no Triton, no C++ compiler)."""
    import torch

    compiled_module = torch.compile(module)
    start = time.perf_counter()
    try:
        got = first_output(compiled_module(*t_xs)).cpu().numpy()
    except Exception as err:  # noqa: BLE001 - the row goes on without this contender
        row.notes.append(f"torch.compile failed: {type(err).__name__}: {str(err).strip().splitlines()[0][:160]}")
        return {}
    row.max_rel_err = max(row.max_rel_err, max_rel_err(got, want))
    row.notes.append(f"torch.compile's first call (its compile): {time.perf_counter() - start:.1f} s")

    def inductor():
        compiled_module(*t_xs)
        dev.sync_torch()

    return {"torch_compile": inductor}


def timed_call(function, args, sync):
    def call():
        function(*args)
        sync()
    return call


def machine() -> dict:
    """What ran it (without ``common.machine_info``'s BLAS details: this script needs no bench extras)."""
    import os
    import platform

    import torch

    from autosched._tvm import TVM_VERSION, host_cpu

    return {"cpu": host_cpu(), "n_cores": os.cpu_count(), "tvm": TVM_VERSION, "torch": torch.__version__,
            "python": platform.python_version(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


# --- main -----------------------------------------------------------------------------------------------------
def print_table(rows: list[Row], bar: float) -> None:
    head = f"{'case':<12} {'shape':<22} {'tune s':>7} {'trials':>6} {'untuned ms':>10} {'autosched ms':>12} " \
           f"{'torch ms':>9} {'vs torch':>8} {'rel err':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        def f(v, fmt):
            return format(v, fmt) if v is not None else "-"
        print(f"{r.case:<12} {r.shape:<22} {r.tune_s:>7.0f} {r.n_measured:>6} {f(r.untuned_ms, '10.3f')} "
              f"{f(r.autosched_ms, '12.3f')} {f(r.torch_ms, '9.3f')} {f(r.speed_vs_torch, '8.2f')} "
              f"{f(r.max_rel_err, '8.1e')}" + (f"  ERROR {r.error}" if r.error else ""))
        for note in r.notes:
            print(f"    {note}")
    fp32 = next((r for r in rows if r.case == "matmul_fp32"), None)
    if fp32 is not None and fp32.speed_vs_torch is not None:
        verdict = "met" if fp32.speed_vs_torch >= bar else "NOT met"
        print(f"fp32 matmul at {fp32.speed_vs_torch:.0%} of PyTorch's speed (bar {bar:.0%}): {verdict}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="", help="default: this GPU's architecture (sm_XX); llvm: this CPU")
    p.add_argument("--budget-s", type=float, default=400.0, help="tuning seconds for all five cases together")
    p.add_argument("--model-share", type=float, default=SHARES["model"],
                   help="the models' share of --budget-s (the kernels split the rest)")
    p.add_argument("--small", action="store_true", help="small shapes and the tiny CNN (a dry run of the steps)")
    p.add_argument("--repeat", type=int, default=7, help="timing rounds per contender")
    p.add_argument("--out", default="gpu_check", help="JSON name under bench/results/")
    p.add_argument("--no-torch-compile", action="store_true", help="leave torch.compile out of the models' rows")
    p.add_argument("--models", default="", help="built-in models (NAME) or corpus models (corpus:NAME[@small]), "
                                                "comma-separated; default: corpus:resnet50,corpus:bert (--small: "
                                                "tiny_cnn); they split the model share of the budget")
    args = p.parse_args(argv)

    from autosched._tvm import tvm
    from autosched.targets import check_measurable, make_target

    spec = args.target
    if not spec:
        dev = tvm.cuda(0)
        if not dev.exist:
            print("gpu_check: no CUDA GPU on this machine (give --target llvm for a dry run on this CPU)")
            return 2
        spec = "sm_" + dev.compute_version.replace(".", "")
    target = check_measurable(make_target(spec))
    devices = Devices(target)
    if not devices.torch_ok:
        print("gpu_check: this PyTorch has no CUDA support, so there is nothing to compare with")
        return 2
    shapes = SMALL if args.small else FULL
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        share = shares(args.model_share)
        rows = kernel_rows(target, shapes, args.budget_s, devices, work, args.repeat, share)
        models = args.models.split(",") if args.models else shapes["models"]
        for name in models:  # the models split the model share
            seconds = args.budget_s * share["model"] / len(models)
            print(f"[model] tuning {name} for {seconds:.0f} s ...", flush=True)
            try:
                rows.append(model_row(name, target, seconds, devices, work, args.repeat, not args.no_torch_compile))
            except Exception as err:  # noqa: BLE001
                rows.append(Row(name, "model", None, 0.0, 0, None, None, None, None,
                                error=f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"))
    wall_s = time.perf_counter() - start
    print_table(rows, 0.5)
    print(f"wall time {wall_s:.0f} s")
    info = machine()
    if devices.kind == "cuda":
        import torch

        info["gpu"] = torch.cuda.get_device_name(0)
    path = write_json(args.out, {"machine": info, "target": str(target), "budget_s": args.budget_s,
                                 "model_share": args.model_share,
                                 "small": args.small, "wall_s": wall_s,
                                 "rows": [{**asdict(r), "speed_vs_torch": r.speed_vs_torch} for r in rows]})
    print(f"wrote {path}")
    return 0 if all(r.error is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
