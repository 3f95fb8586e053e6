"""The one module that knows TVM's (moving) import paths and the two fixes it needs here.

Everything else imports TVM pieces from here, so a TVM upgrade touches one file.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any


def _fast_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """Cheap replacement for ``inspect.stack()``.

    TVMScript calls ``inspect.stack()`` for every ``@T.prim_func``; the stdlib version costs
    O(frames x sys.modules), which makes MetaSchedule's tensor-intrinsic import take a minute.
    """
    frame, out = sys._getframe(1), []
    while frame is not None:
        fn, ln = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(fn, ln)
        out.append(
            inspect.FrameInfo(frame, fn, ln, frame.f_code.co_name, [line] if line else None, 0 if line else None)
        )
        frame = frame.f_back
    return out


def install_fast_inspect() -> None:
    """Install the fast ``inspect.stack`` (main process and every TVM worker process)."""
    inspect.stack = _fast_stack


install_fast_inspect()

import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import (  # noqa: E402
    relax,
    s_tir,  # noqa: E402
    te,
    tirx,
    topi,
)
from tvm.s_tir import meta_schedule as ms  # noqa: E402
from tvm.support import popen_pool  # noqa: E402
from tvm.target import Target  # noqa: E402

PrimFunc = tirx.PrimFunc

# A worker only builds and runs TVM modules, but tvm_ffi imports PyTorch (where installed) as it loads: about 2 s of
# a worker's 3 s start, paid again by every worker a crashing candidate takes down. The worker command blocks it.
_WORKER_COMMAND = "import sys; sys.modules['torch'] = None; from tvm.exec.popen_worker import main; main()"


class _TorchFreeWorker(popen_pool.PopenWorker):
    """TVM's PopenWorker, started as TVM starts it (same pipes, same worker loop) but without PyTorch."""

    def _start(self) -> None:
        if self._proc is not None or sys.platform == "win32":
            return super()._start()
        main_read, worker_write = os.pipe()
        worker_read, main_write = os.pipe()
        self._proc = subprocess.Popen([sys.executable, "-c", _WORKER_COMMAND, str(worker_read), str(worker_write)],
                                      pass_fds=(worker_read, worker_write), stdout=self._stdout, stderr=self._stderr)
        os.close(worker_read)
        os.close(worker_write)
        self._reader = os.fdopen(main_read, "rb")
        self._writer = os.fdopen(main_write, "wb")
        return None


class PopenPoolExecutor(popen_pool.PopenPoolExecutor):
    """TVM's PopenPoolExecutor with workers that start without importing PyTorch (1 s instead of 3 s)."""

    def _worker_run(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        with self._lock:  # TVM's _worker_run then finds this thread's worker and uses it
            tid = threading.get_ident()
            if tid not in self._worker_map:
                self._worker_map[tid] = _TorchFreeWorker(self._initializer, self._initargs,
                                                         self._maximum_process_uses, self._stdout, self._stderr)
        return super()._worker_run(fn, args, kwargs)


IRModule = tvm.IRModule
Schedule = s_tir.Schedule
ScheduleError = s_tir.ScheduleError
Trace = s_tir.Trace
TVM_VERSION: str = tvm.__version__

SAMPLE_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")


_INTRINS = "tvm.s_tir.tensor_intrin"
# Which of TVM's tensor-intrinsic modules a target kind can use. Importing the package registers all of them,
# the CUDA ones alone taking ~2.5 s of TVMScript parsing; an LLVM target needs 0.5 s of them.
_INTRIN_MODULES = {"llvm": ("x86", "arm_cpu", "riscv_cpu"), "cuda": ("cuda",), "nvptx": ("cuda",),
                   "rocm": ("rocm",), "metal": ("metal",), "hexagon": ("hexagon",), "c": ()}


def load_tensor_intrins(target: Target) -> None:
    """Register TVM's tensor intrinsics for ``target`` before a ``TuneContext`` is made for it.

    ``TuneContext`` imports ``tvm.s_tir.tensor_intrin``, whose ``__init__`` registers every target's
    intrinsics. Unless that package is already imported, it is registered here without running its
    ``__init__`` (so ``TuneContext``'s import finds it and does nothing) and only the modules the target's
    kind can use are imported; a kind not known here gets the whole package.
    """
    names = _INTRIN_MODULES.get(target.kind.name)
    package = _intrin_package()
    if names is None and getattr(package, "__autosched_partial__", False):
        package.__spec__.loader.exec_module(package)  # the package's own __init__: every target's intrinsics
        package.__autosched_partial__ = False
    for name in names or ():
        load_tensor_intrin_module(name)
    if "cuda" in (names or ()):
        _register_bf16_wmma()


def _register_bf16_wmma() -> None:
    """bfloat16 wmma intrinsics (operands from dynamic shared memory, float32 accumulation), made by TVM's own
    generators: TVM 0.27 registers float16 and int8 wmma groups only, while nvcc takes ``nv_bfloat16`` fragments on
    sm_80 and later (spaces/tensor_core.py lists the group). Names follow TVM's (``wmma_load_16x16x16_bf16_a_...``);
    a second call does nothing."""
    from tvm.s_tir import TensorIntrin
    from tvm.s_tir.tensor_intrin import cuda

    if TensorIntrin.get("wmma_sync_16x16x16_bf16bf16f32", allow_missing=True) is not None:
        return
    for is_b, trans, name in ((False, False, "a"), (True, False, "b"), (True, True, "b_trans")):
        TensorIntrin.register(f"wmma_load_16x16x16_bf16_{name}_shared_dyn",
                              *cuda.get_wmma_load_intrin(16, 16, 16, "bfloat16", "shared.dyn", is_b, trans))
    for trans in (False, True):
        TensorIntrin.register("wmma_sync_16x16x16_bf16bf16f32" + ("_trans" if trans else ""),
                              *cuda.get_wmma_sync_intrin(16, 16, 16, "bfloat16", "float32", trans))


def load_tensor_intrin_module(name: str) -> None:
    """Import one of TVM's tensor-intrinsic modules (``"x86"``, ``"cuda"``, ...) without the others."""
    import importlib

    _intrin_package()
    importlib.import_module(f"{_INTRINS}.{name}")


def _intrin_package() -> Any:
    import importlib.util

    package = sys.modules.get(_INTRINS)
    if package is None:
        spec = importlib.util.find_spec(_INTRINS)
        package = importlib.util.module_from_spec(spec)
        package.__autosched_partial__ = True
        sys.modules[_INTRINS] = package
        s_tir.tensor_intrin = package
    return package


def structural_hash(obj: Any) -> int:
    return int(tvm_ffi.structural_hash(obj))


def structural_equal(a: Any, b: Any) -> bool:
    return bool(tvm_ffi.structural_equal(a, b))


Call = tvm.ir.expr.Call  # a TIR (or Relax) call; ``call.op.name`` is e.g. "tirx.exp"


def map_calls(node: Any, fn: Callable[[Any], Any]) -> Any:
    """``node`` (an IRModule, PrimFunc, statement or expression) with every call replaced by ``fn(call)``,
    innermost first; ``fn`` returns its argument to keep a call. Unchanged parts stay the same objects."""
    return tvm_ffi.structural_map(node, [(Call, fn)])


def save_json(obj: Any) -> str:
    return tvm.ir.save_json(obj)


def load_json(text: str) -> Any:
    return tvm.ir.load_json(text)


def host_cpu() -> str:
    """LLVM's name for this CPU (``-mcpu=native`` silently produces generic code in TVM 0.27)."""
    return tvm.target.codegen.llvm_get_system_cpu()


PREFER_256 = "prefer-256-bit"  # LLVM's tuning flag of Intel's AVX-512 CPUs (host_features turns it off)


@functools.cache
def host_isa() -> dict[str, bool]:
    """This CPU's instruction-set extensions as LLVM reads them (cpuid, and the kernel's consent for the AVX-512 and
    AMX register state): LLVM feature name -> present. Every x86 extension LLVM knows is named, present or not;
    {} where LLVM cannot read the host."""
    read = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures", allow_missing=True)
    try:
        return {str(k): bool(v) for k, v in read().items()} if read is not None else {}
    except (RuntimeError, ValueError):
        return {}


def cpu_features(target: Target) -> set[str]:
    """The LLVM features of an LLVM target: its ``mcpu``'s, with its ``mattr`` added and removed."""
    return {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target)}


# x86 extensions whose instructions LLVM emits only where code calls their intrinsics by name (system, security,
# cache-control and user-interrupt instructions): a kernel never has them, so their absence does not stop it here
SYSTEM_FEATURES = frozenset(
    "cldemote clflushopt clwb clzero cmpccxadd enqcmd fsgsbase hreset invpcid kl lwp movdir64b movdiri movrs mwaitx "
    "pconfig pku prefetchi ptwrite raoint rdpid rdpru rdrnd rdseed rtm serialize sgx shstk tsxldtrk uintr usermsr "
    "waitpkg wbnoinvd widekl xsave xsavec xsaveopt xsaves".split())


def host_features() -> list[str]:
    """``mattr`` for this CPU's target: the instruction sets it has that LLVM's model of ``host_cpu()`` lacks ("+"),
    and those the model has that it lacks ("-"). A virtual machine often shows a model unlike its features: a
    Sapphire Rapids guest named "rocketlake" (no AVX-512 BF16, VNNI-256 or AMX in the model), an "emeraldrapids"
    guest without AMX, AVX-512 BF16 or FP16 (code using them would die of SIGILL here); empty where they agree.

    Plus ``-prefer-256-bit`` on an Intel CPU with AVX-512: LLVM's tuning for those (Skylake-SP to Granite Rapids)
    prefers 256-bit vectors and splits each 512-bit vector a schedule asks for into two halves, so a kernel
    vectorized at AVX-512's width (``llvm_vector_bits``: 16 float32 lanes) runs on ymm registers (the tuned
    softmax 128x768 of the kernel benchmark: 96 us with the halves, 71 us on zmm, one thread)."""
    return list(_host_features(host_cpu()))


@functools.cache
def _host_features(cpu: str) -> tuple[str, ...]:
    codegen = tvm.target.codegen
    isa, triple = host_isa(), str(codegen.llvm_get_system_triple())
    if not isa or not triple.startswith("x86_64") or not codegen.llvm_is_valid_cpu(cpu, triple):
        return ()
    model = cpu_features(Target({"kind": "llvm", "mcpu": cpu}))
    kernel_isa = sorted((f, on) for f, on in isa.items() if f not in SYSTEM_FEATURES)
    added = [f"+{f}" for f, on in kernel_isa if on and f not in model]
    removed = [f"-{f}" for f, on in kernel_isa if not on and f in model]
    full_width = [f"-{PREFER_256}"] if PREFER_256 in model and isa.get("avx512f") else []
    return tuple(added + removed + full_width)


def missing_features(target: Target) -> list[str]:
    """The instruction sets an LLVM target's kernels may use that this CPU lacks (``SYSTEM_FEATURES`` aside); []
    for a GPU's target (what runs where, other architectures included, is ``targets.runs_here``)."""
    if target.kind.name != "llvm":
        return []
    isa = host_isa()
    return sorted(f for f in cpu_features(target) if isa.get(f) is False and f not in SYSTEM_FEATURES)


def llvm_cpus(triple: str) -> list[str]:
    """The CPU names (``mcpu``) LLVM knows for a target triple, e.g. neoverse-n1 for aarch64-linux-gnu."""
    return [str(c) for c in tvm.target.codegen.llvm_get_cpu_archlist(Target({"kind": "llvm", "mtriple": triple}))]


def cross_compiler(tool: str) -> Callable[..., Any]:
    """An ``export_library`` fcompile that links with ``tool`` (e.g. aarch64-linux-gnu-gcc)."""
    from tvm.support import cc

    return cc.cross_compiler(tool)


def as_python(obj: Any) -> Any:
    """Turn TVM containers/immediates (as in ``Trace.as_json()``) into plain JSON-able Python."""
    if isinstance(obj, (list, tuple)) or type(obj).__name__ == "Array":
        return [as_python(x) for x in obj]
    if isinstance(obj, dict) or type(obj).__name__ == "Map":
        return {str(k): as_python(v) for k, v in obj.items()}
    if isinstance(obj, tirx.IntImm):
        return int(obj.value)
    if isinstance(obj, tirx.FloatImm):
        return float(obj.value)
    if isinstance(obj, str):
        return str(obj)
    return obj


def arg_specs(func: PrimFunc) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of every buffer argument of a PrimFunc."""
    infos = ms.arg_info.ArgInfo.from_prim_func(func)
    return [(tuple(int(d) for d in info.shape), str(info.dtype)) for info in infos]


def llvm_vector_bits(target: Target) -> int:
    """The widest vector register of an LLVM target's CPU: 512 with AVX-512, 256 with AVX/AVX2, else 128 (SSE,
    NEON). From the target's features (TVM's ``llvm_get_vector_width`` answers 512 for every x86 CPU)."""
    features = cpu_features(target)
    return 512 if "avx512f" in features else 256 if "avx" in features else 128


def estimate_flops(mod: IRModule) -> float:
    return float(s_tir.analysis.estimate_tir_flops(mod))


def set_num_threads(n_threads: int) -> None:
    """Size TVM's CPU thread pool (call before the first kernel runs in this process)."""
    os.environ["TVM_NUM_THREADS"] = str(n_threads)
    tvm_ffi.get_global_func("runtime.config_threadpool")(1, n_threads)


def num_threads() -> int:
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


def cpu_device() -> Any:
    return tvm.cpu(0)


BufferLoad = tvm.ir.TensorLoad  # a buffer load expression (tirx.BufferLoad before TVM 0.27)


def expr_dtype(expr: Any) -> str:
    """The dtype of a TIR expression, e.g. "float32" (TVM 0.27: ``expr.ty``; ``expr.dtype`` before)."""
    return str(getattr(expr, "ty", ""))


def mutate_graph_functions(mod: IRModule, mutator: Any, changed: Callable[[], bool]) -> IRModule:
    """Run a ``relax.PyExprMutator`` built on ``mod`` over its Relax functions; ``mod`` itself if nothing
    ``changed()``."""
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get() if changed() else mod


__all__ = [
    "BufferLoad", "Call", "IRModule", "PrimFunc", "PopenPoolExecutor", "SAMPLE_KINDS", "Schedule", "ScheduleError",
    "TVM_VERSION", "Target", "Trace", "arg_specs", "as_python", "cpu_device", "cross_compiler",
    "cpu_features", "estimate_flops", "expr_dtype", "host_cpu", "host_isa", "install_fast_inspect", "llvm_cpus",
    "load_json", "map_calls", "missing_features", "ms",
    "mutate_graph_functions", "num_threads", "relax", "s_tir", "save_json", "set_num_threads", "structural_equal",
    "structural_hash", "te", "tirx", "topi", "tvm", "tvm_ffi",
]
