"""Shared helpers of the benchmarks: a fair environment, timing of Python peers, table and JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
_BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def fair_environment(n_threads: int) -> None:
    """Re-exec without the OpenBLAS core-type override (it pins numpy to slower kernels on this CPU),
    and fix every library's thread count to ``n_threads`` before any of them starts a pool."""
    if any(k in os.environ for k in _BLAS_OVERRIDES):
        env = {k: v for k, v in os.environ.items() if k not in _BLAS_OVERRIDES}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n_threads)


def machine_info() -> dict:
    import numpy as np
    import threadpoolctl

    blas = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    from autosched._tvm import TVM_VERSION, host_cpu

    return {"cpu": host_cpu(), "machine": platform.machine(), "n_cores": os.cpu_count(), "numpy": np.__version__,
            "openblas_kernel": blas[0].get("architecture") if blas else None, "tvm": TVM_VERSION,
            "python": platform.python_version(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def openvino_version() -> str | None:
    """The installed OpenVINO (a peer of the model benchmarks when it is: the ``bench`` extra), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openvino")
    except PackageNotFoundError:
        return None


def load_now() -> float:
    """1-minute load average: other work on this 2-core machine skews timings, so it is recorded."""
    return os.getloadavg()[0]


def time_callable(*args, **kwargs) -> float:
    """``autosched.timing.time_callable``, imported on use: importing autosched loads numpy and TVM, which
    must come after ``fair_environment`` has fixed the thread counts."""
    from autosched.timing import time_callable as timer

    return timer(*args, **kwargs)


def time_interleaved(*args, **kwargs) -> dict[str, list[float]]:
    """``autosched.timing.time_interleaved``, imported on use (see ``time_callable``)."""
    from autosched.timing import time_interleaved as timer

    return timer(*args, **kwargs)


def kernel_call(mod, target, arrays: list, out_specs: list[tuple[tuple[int, ...], str]]):
    """A tensor program compiled in this process and called the way numpy and PyTorch are: one Python call on
    prepared arguments (destination-passing: the outputs are preallocated). Returns (call, output tensors)."""
    from autosched._tvm import cpu_device, tvm

    function = tvm.compile(mod, target=target)["main"]
    dev = cpu_device()
    args = [tvm.runtime.tensor(a, dev) for a in arrays] + [tvm.runtime.empty(s, d, dev) for s, d in out_specs]
    return (lambda: function(*args)), args[len(arrays):]


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    from autosched.masking import mask_data

    plain = json.loads(json.dumps(payload, default=str))  # then every string is masked (a --db URL's password)
    path.write_text(json.dumps(mask_data(plain), indent=2))
    return path


def git_commit(where: Path | None = None) -> str:
    """The commit the benchmark runs at (or of the tree holding ``where``), ``+`` when the work tree has changes
    (a row says what code made it)."""
    import subprocess

    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], capture_output=True, text=True,
                              cwd=where or Path(__file__).parent).stdout.strip()

    return (git("rev-parse", "--short", "HEAD") or "unknown") + ("+" if git("status", "--porcelain", "-uno") else "")
