"""Lower precision: each model tuned and compiled in float32, bf16 and int8 (--precision), timed beside ONNX Runtime
in float32 and in int8 (the same model through ONNX Runtime's own static quantizer: QDQ, per-channel int8 weights,
uint8 activations) and PyTorch in float32 and in bfloat16 (``module.to(bfloat16)``).

    python bench/precision.py                              # zoo:bert and corpus:resnet50, 180 s of tuning each
    python bench/precision.py --models bert --time 30 --precisions fp32,bf16 --out precision_quick

Each model is built in code with random weights (a zoo name, or ``corpus:NAME`` for a full-size corpus model),
exported to ONNX and imported from that file. autosched tunes it once per precision with the same wall-time
budget (``tune_model``, whole process timed, setup included) at ``--threads``. Then, in one process, the call a
user makes for every contender (numpy or torch tensors in, out), interleaved rounds, same timer, medians.
Accuracy: the max relative error of each output against ONNX Runtime's float32 on 3 random inputs and, for
classifiers (one 2-D output), how often the top-1 class agrees with float32 over ``--agreement`` random inputs.
Both int8 contenders calibrate on 8 random inputs. PyTorch's own bf16 (``module.to(bfloat16)``) is in the
agreement too, as the reference for what rounding does to this model: a random-weight deep CNN maps random inputs
to a few classes with near-tied logits (ResNet-50: top-2 margin ~0.1 of the logits' spread), so any rounding
flips some.
Writes bench/results/<out>.json and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fair_environment, git_commit, load_now, machine_info, time_interleaved, write_json  # noqa: E402


def _export(name: str, work: Path) -> tuple[Path, object, object]:
    """(ONNX file, torch module, example input) of a zoo model or ``corpus:NAME`` (full size)."""
    if name.startswith("corpus:"):
        from autosched.corpus import catalog as corpus

        short = name.removeprefix("corpus:")
        module, (example,) = corpus.build_module(short, "full")
        return corpus.export_onnx(short, work / f"{short}.onnx", "full"), module, example
    from autosched.corpus import zoo

    module, (example,) = zoo.build(name)
    return zoo.export_onnx(name, work / f"{name}.onnx"), module, example


def _ort_int8(path: Path, input_name: str, shape: tuple, seed: int) -> Path:
    """``path`` through ONNX Runtime's static quantizer, calibrated on 8 random inputs."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(seed + 1)
            self.batches = iter([{input_name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict | None:
            return next(self.batches, None)

    out = path.with_name(path.stem + "_int8_qdq.onnx")
    quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
    return out


def _tune(path: Path, db: Path, precision: str, seconds: float, threads: int) -> tuple[float, int]:
    from autosched import TuneConfig
    from autosched.api import tune_model

    start = time.perf_counter()
    config = TuneConfig(n_trials=0, n_threads=threads, time_budget_s=seconds)
    result = tune_model(str(path), "llvm", str(db), config, precision=precision)
    return time.perf_counter() - start, result.n_tasks


def bench_model(name: str, args: argparse.Namespace, work: Path) -> dict:
    import copy

    import numpy as np
    import torch

    from autosched._tvm import set_num_threads
    from autosched.api import compile as compile_model
    from autosched.deploy.reference import max_relative_error, onnxruntime_session

    path, module, example = _export(name, work)
    precisions = args.precisions.split(",")
    tuning, compiled = {}, {}
    for precision in precisions:
        print(f"[{name}] tuning {precision} for {args.time:.0f} s ...", flush=True)
        tuning[precision] = _tune(path, work / f"{path.stem}_{precision}.db", precision, args.time, args.threads)
        compiled[precision] = compile_model(str(path), "llvm", str(work / f"{path.stem}_{precision}.db"),
                                            args.threads, precision=precision)
    session = onnxruntime_session(path.read_bytes(), args.threads)
    feed_name = session.get_inputs()[0].name
    peers = {"onnxruntime_fp32": session}
    if "int8" in precisions:
        peers["onnxruntime_int8"] = onnxruntime_session(
            _ort_int8(path, feed_name, tuple(example.shape), args.seed).read_bytes(), args.threads)
    module_bf16 = copy.deepcopy(module).to(torch.bfloat16)
    set_num_threads(args.threads)
    torch.set_num_threads(args.threads)

    def ort(peer: str, x: np.ndarray) -> list:
        return peers[peer].run(None, {feed_name: x})

    rng = np.random.default_rng(args.seed)
    inputs = [rng.standard_normal(example.shape).astype(np.float32) for _ in range(3)]
    contenders = {f"autosched_{p}": m for p, m in compiled.items()}
    contenders.update({peer: (lambda x, peer=peer: ort(peer, x)) for peer in peers if peer != "onnxruntime_fp32"})
    errors = {k: max(max_relative_error(f(x), ort("onnxruntime_fp32", x)) for x in inputs)
              for k, f in contenders.items() if k != "autosched_fp32"}
    errors["autosched_fp32"] = max(max_relative_error(compiled["fp32"](x), ort("onnxruntime_fp32", x))
                                   for x in inputs)
    with torch.no_grad():
        t32, t16 = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[0]).to(torch.bfloat16)
        want = ort("onnxruntime_fp32", inputs[0])
        errors["torch_bf16"] = max_relative_error([module_bf16(t16).float().numpy()], want)
        x = inputs[0]
        calls = {k: (lambda f=f: f(x)) for k, f in contenders.items()}
        calls.update({"onnxruntime_fp32": lambda: ort("onnxruntime_fp32", x), "torch_fp32": lambda: module(t32),
                      "torch_bf16": lambda: module_bf16(t16)})
        times = {k: statistics.median(v) for k, v in time_interleaved(calls, args.repeat, min_round_s=0.2).items()}
    row = {"model": name, "tuning_s": {k: v[0] for k, v in tuning.items()},
           "tasks": {k: v[1] for k, v in tuning.items()}, "max_rel_error_vs_fp32": errors,
           "precision_error_on_compile": {p: m.precision_error for p, m in compiled.items() if p != "fp32"},
           "load": load_now(),
           **{f"{k}_s": v for k, v in times.items()}}
    out_shape = session.get_outputs()[0].shape
    if len(session.get_outputs()) == 1 and len(out_shape) == 2:  # a classifier: [batch, classes]
        print(f"[{name}] top-1 agreement over {args.agreement} random inputs ...", flush=True)
        batch = [rng.standard_normal(example.shape).astype(np.float32) for _ in range(args.agreement)]
        want = [int(np.argmax(ort("onnxruntime_fp32", x)[0])) for x in batch]
        agreeing = {k: f for k, f in contenders.items() if k != "autosched_fp32"}
        agreeing["torch_bf16"] = lambda x: [module_bf16(torch.from_numpy(x).to(torch.bfloat16)).float().numpy()]
        with torch.no_grad():
            row["top1_agreement"] = {k: sum(int(np.argmax(f(x)[0])) == w for x, w in zip(batch, want, strict=True))
                                     / len(batch) for k, f in agreeing.items()}
    return row


def print_table(rows: list[dict], precisions: list[str]) -> None:
    low = [p for p in precisions if p != "fp32"]
    peers = ["onnxruntime_fp32", *(["onnxruntime_int8"] if "int8" in low else []), "torch_fp32", "torch_bf16"]
    checked = [f"autosched_{p}" for p in low] + (["onnxruntime_int8"] if "int8" in low else []) + ["torch_bf16"]
    print("\n| model | autosched fp32 ms | " + " | ".join(f"autosched {p} ms | {p} speedup" for p in low)
          + " | " + " | ".join(f"{k} ms" for k in peers) + " | "
          + " | ".join(f"{k} max rel. error | {k} top-1 agreement" for k in checked) + " |")
    print("|---|" + "---:|" * (1 + 2 * len(low) + len(peers) + 2 * len(checked)))
    for r in rows:
        cells = [r["model"], f"{r['autosched_fp32_s'] * 1e3:.3f}"]
        cells += [c for p in low for c in (f"{r[f'autosched_{p}_s'] * 1e3:.3f}",
                                            f"{r['autosched_fp32_s'] / r[f'autosched_{p}_s']:.2f}x")]
        cells += [f"{r[f'{k}_s'] * 1e3:.3f}" for k in peers]
        cells += [c for k in checked for c in (f"{r['max_rel_error_vs_fp32'][k]:.1e}",
                                                f"{r['top1_agreement'][k]:.1%}" if "top1_agreement" in r else "-")]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert,corpus:resnet50", help="zoo models, or corpus:NAME (full size)")
    p.add_argument("--time", type=float, default=180, help="tuning seconds per model and precision")
    p.add_argument("--precisions", default="fp32,bf16,int8", help="fp32 first, then any of bf16, fp16, int8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=7, help="interleaved timing rounds")
    p.add_argument("--agreement", type=int, default=1000, help="random inputs for the top-1 agreement")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="precision")
    p.add_argument("--db-dir", help="keep the tuning databases here (default: a temporary folder)")
    args = p.parse_args()
    fair_environment(args.threads)
    commit = git_commit()  # the code this run loads
    work = Path(args.db_dir or tempfile.mkdtemp(prefix="autosched-precision-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = [bench_model(name, args, work) for name in args.models.split(",")]
    print_table(rows, args.precisions.split(","))
    write_json(args.out, {"machine": machine_info(), "commit": commit, "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
