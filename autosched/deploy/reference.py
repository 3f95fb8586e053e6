"""ONNX Runtime as the reference implementation (outputs to match) and the peer to time against; OpenVINO as a
second peer (the benchmarks)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from autosched.errors import UserInputError
from autosched.graph.frontends import Model


def onnxruntime_session(model: Model | bytes, n_threads: int, profile: bool = False) -> Any:
    """An ONNX Runtime CPU session at its default settings but the thread count (and profiling, if asked), for
    an ONNX model or an ONNX file's bytes."""
    onnx_bytes = model if isinstance(model, bytes) else model.onnx_bytes
    if onnx_bytes is None:
        raise UserInputError(f"{model.name} is not an ONNX model: ONNX Runtime cannot run it")
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise UserInputError("comparing with ONNX Runtime needs the onnx extra: pip install 'autosched[onnx]'") from err
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = n_threads, 1
    opts.log_severity_level = 3
    opts.enable_profiling = profile
    return ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])


def openvino_session(model: Model | bytes | str | os.PathLike, n_threads: int
                     ) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """OpenVINO's CPU plugin for an ONNX model, an ONNX file's bytes or its path, as a call made the way ONNX
    Runtime's ``session.run`` is: a feed (input name -> numpy array) in, the outputs in the graph's order out (new
    numpy arrays), one inference per call on one infer request (so one call at a time). The plugin's defaults but
    what a fair comparison needs: the latency hint (one stream, one inference at a time), ``n_threads`` threads,
    and float32 inference precision -- on a CPU with AMX or AVX512-BF16 the plugin's default is bf16, whose outputs
    would not match ONNX Runtime's (nor compare with autosched's float32)."""
    try:
        import openvino as ov
        import openvino.properties as props
        import openvino.properties.hint as hints
    except ImportError as err:
        raise UserInputError("comparing with OpenVINO needs the bench extra: pip install 'autosched[bench]'") from err
    if isinstance(model, Model):
        if model.onnx_bytes is None:
            raise UserInputError(f"{model.name} is not an ONNX model: OpenVINO cannot run it")
        model = model.onnx_bytes
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model if isinstance(model, bytes) else os.fspath(model)), "CPU", {
        hints.performance_mode: hints.PerformanceMode.LATENCY, props.inference_num_threads: n_threads,
        hints.inference_precision: ov.Type.f32})
    request = compiled.create_infer_request()

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(request.infer(feed).to_tuple())  # copies of the request's output tensors (share_outputs=False)

    return run


def has_qdq(onnx_bytes: bytes | None) -> bool:
    """Whether an ONNX model is quantized with QuantizeLinear/DequantizeLinear pairs (QDQ)."""
    return onnx_bytes is not None and b"DequantizeLinear" in onnx_bytes


def reference_session(model: Model, n_threads: int, timed: Any = None) -> Any:
    """The ONNX Runtime session to check outputs against: ``timed`` (a default session; made here if not given),
    except for a QDQ model, which gets a session that computes what the model says (graph optimizations at the
    basic level): ONNX Runtime's fused integer kernels (QLinearConv, QLinearMatMul) saturate uint8 x int8 pair
    sums on x86 CPUs without VNNI, so the default session's outputs can be off by tens of quantization steps."""
    if not has_qdq(model.onnx_bytes):
        return timed if timed is not None else onnxruntime_session(model, n_threads)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = n_threads, 1
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.onnx_bytes, opts, providers=["CPUExecutionProvider"])


def run_onnxruntime(session: Any, model: Model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return list(session.run(None, {spec.name: x for spec, x in zip(model.inputs, inputs, strict=True)}))


def onnxruntime_executor_times(profiled_session: Any) -> list[float]:
    """ONNX Runtime's own time for running the graph, seconds per run, from a session made with
    ``profile=True`` (its profiler's ``SequentialExecutor::Execute`` events; this ends the profiling): what
    ``session.run`` of that session costs beyond it is its call overhead, as TVM's timer on the VM is for
    autosched. The first runs (allocations) are left out."""
    import json
    from pathlib import Path

    path = Path(profiled_session.end_profiling())
    try:
        events = json.loads(path.read_text())
    finally:
        path.unlink(missing_ok=True)
    times = [e["dur"] * 1e-6 for e in events if e.get("name") == "SequentialExecutor::Execute"]
    return times[min(5, len(times) // 2):]


def max_relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Largest |got - want| over all outputs, relative to the largest |want| of that output (at least 1)."""
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            return float("inf")
        scale = max(float(np.abs(w).max()) if w.size else 1.0, 1.0)
        worst = max(worst, float(np.abs(g.astype(np.float64) - w).max()) / scale if w.size else 0.0)
    return worst
