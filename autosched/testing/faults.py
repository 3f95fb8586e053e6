"""Faults injected through the real worker processes, for the reliability tests (RELIABILITY.md).

Build faults: a candidate whose ``mod_json`` is ``fault_module(kind)`` makes the build worker of a
``FaultyBuilder`` raise, kill itself, crash or hang. Run faults: ``run_fault(kind)`` is an expression to add to a
kernel's output that, when the kernel runs in the runner worker, crashes it or exhausts memory.
"""

from __future__ import annotations

import os
import signal
import time

from autosched.measure import worker
from autosched.measure.local import LocalBuilder

FAULT_PREFIX = "autosched-fault:"
BUILD_FAULTS = ("raise", "kill", "segfault", "hang")


def fault_module(kind: str) -> str:
    """A ``Candidate.mod_json`` that makes a ``FaultyBuilder``'s worker fail in the way ``kind`` says."""
    if kind not in BUILD_FAULTS:
        raise ValueError(f"unknown build fault {kind!r}; choose one of {BUILD_FAULTS}")
    return FAULT_PREFIX + kind


def build(mod_json: str, target_json: str, out_path: str) -> float:
    """``worker.build``, unless the module is a fault marker (runs inside the build worker process)."""
    if not mod_json.startswith(FAULT_PREFIX):
        return worker.build(mod_json, target_json, out_path)
    kind = mod_json[len(FAULT_PREFIX):]
    if kind == "raise":
        raise RuntimeError("injected compiler failure")
    if kind == "kill":  # what the OOM killer does to a compile that grows too big
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(3600)  # "hang"
    return 0.0


class FaultyBuilder(LocalBuilder):
    """The real process-pool builder, whose workers obey ``fault_module`` markers."""

    build_fn = staticmethod(build)


RUN_FAULTS = ("segfault", "oom_kill", "abort", "hang", "alloc", "wrong")


def faulty_matmul(n: int, kind: str | None = None):
    """An IRModule with the signature of an ``n x n x n`` matmul task that, when run in the runner worker, does
    what ``kind`` says: ``segfault`` (SIGSEGV), ``oom_kill`` (SIGKILL, as the OOM killer sends), ``abort``,
    ``hang`` (sleeps for ever), ``alloc`` (asks for 4 EiB of scratch memory: fails even where the kernel
    overcommits memory), ``wrong`` (adds 1 to every output); ``None``: a correct matmul."""
    from autosched._tvm import IRModule, te, tirx

    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    calls = {"segfault": ("raise", int(signal.SIGSEGV)), "oom_kill": ("raise", int(signal.SIGKILL)),
             "abort": ("abort",), "hang": ("sleep", 1000)}
    if kind is None:
        out = c
    elif kind in calls:
        name, *args = calls[kind]
        out = te.compute((n, n), lambda i, j: c[i, j] + tirx.Cast("float32", tirx.call_extern("int32", name, *args)),
                         name="D")
    elif kind == "alloc":
        huge = te.compute((tirx.const(1 << 60, "int64"),), lambda x: a[0, 0], name="Huge")
        out = te.compute((n, n), lambda i, j: c[i, j] + huge[tirx.Cast("int64", i * n + j)] - a[0, 0], name="D")
    elif kind == "wrong":
        out = te.compute((n, n), lambda i, j: c[i, j] + tirx.const(1.0, "float32"), name="D")
    else:
        raise ValueError(f"unknown run fault {kind!r}; choose one of {RUN_FAULTS}")
    return IRModule({"main": te.create_prim_func([a, b, out])})
