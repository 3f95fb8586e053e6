"""Targets as data: this CPU, another CPU by cross-compilation, a CUDA GPU by tag or by architecture.

``make_target`` turns what a user types into a full TVM target; the full target JSON is part of every task
key and record, so a schedule is never applied to a target it was not tuned for.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import shutil
from collections.abc import Callable, Iterable
from typing import Any

from autosched._tvm import (
    Target,
    cpu_features,
    cross_compiler,
    host_cpu,
    host_features,
    llvm_cpus,
    missing_features,
    tvm,
)
from autosched.bandwidth import copy_bandwidth
from autosched.bounded import check_depth
from autosched.config import resolve_threads
from autosched.errors import UserInputError

TARGET_ALIASES = {"llvm": "llvm", "cpu": "llvm", "cuda": "nvidia/nvidia-h100", "gpu": "nvidia/nvidia-h100"}

# A CUDA architecture -> the TVM tag of a GPU of that architecture, whose limits (max_threads_per_block,
# max_shared_memory_per_block, registers_per_block, thread_warp_size, ...) an ``sm_XX`` target takes.
CUDA_ARCH_TAGS = {
    "sm_70": "nvidia/nvidia-v100", "sm_75": "nvidia/nvidia-t4", "sm_80": "nvidia/nvidia-a100",
    "sm_86": "nvidia/nvidia-a10", "sm_87": "nvidia/jetson-agx-orin-64gb", "sm_89": "nvidia/geforce-rtx-4090",
    "sm_90": "nvidia/nvidia-h100", "sm_100": "nvidia/nvidia-b100", "sm_120": "nvidia/geforce-rtx-5060-ti",
}
# The most shared memory a block may have when it asks for it (cudaDevAttrMaxSharedMemoryPerBlockOptin; the CUDA
# programming guide's table of compute capabilities); a tag's max_shared_memory_per_block is the 48 KB without asking,
# the limit of static shared memory. TVM's CUDA runtime asks for a kernel's dynamic shared memory at launch.
CUDA_MAX_DYNAMIC_SHARED = {"sm_70": 98304, "sm_75": 65536, "sm_80": 166912, "sm_86": 101376, "sm_87": 166912,
                           "sm_89": 101376, "sm_90": 232448, "sm_100": 232448, "sm_120": 101376}
CUDA_ARCH_SPECIFIC = ("sm_90a", "sm_100a", "sm_120a")  # arch-specific features (wgmma, ...): same limits
CUDA_LIMIT_KEYS = ("max_num_threads", "max_threads_per_block", "max_shared_memory_per_block", "registers_per_block",
                   "thread_warp_size", "l2_cache_size_bytes")

# Cross-compiled CPUs: name -> (LLVM triple, default mcpu, mattr). Neoverse N1: Graviton2, Ampere Altra.
CROSS_CPUS = {"aarch64": ("aarch64-linux-gnu", "neoverse-n1", ["+neon"]),
              "arm64": ("aarch64-linux-gnu", "neoverse-n1", ["+neon"])}
CROSS_COMPILERS = {"aarch64": "aarch64-linux-gnu-gcc"}  # first part of the triple -> the C cross compiler

TARGET_HINT = ("use llvm (this CPU), aarch64 or aarch64:<mcpu> (cross-compiled), cuda, an architecture such as "
               "sm_80 or cuda:sm_90, a TVM target tag such as nvidia/nvidia-h100, or a JSON dict like "
               "'{\"kind\": \"llvm\", \"mcpu\": \"znver3\"}'")


# The x86 vector and matrix extensions that decide which code a CPU runs fast or at all (LLVM's names), with the
# names people know them by: what ``autosched doctor`` shows and an artifact's manifest lists of its target.
VECTOR_FEATURES = {"avx2": "AVX2", "fma": "FMA", "avx512f": "AVX-512F", "avx512bw": "AVX-512BW",
                   "avx512vl": "AVX-512VL", "avx512vnni": "AVX-512 VNNI", "avxvnni": "AVX-VNNI",
                   "avx512bf16": "AVX-512 BF16", "avx512fp16": "AVX-512 FP16", "amx-tile": "AMX",
                   "amx-int8": "AMX-INT8", "amx-bf16": "AMX-BF16"}


def vector_features(target: Target) -> list[str]:
    """The ``VECTOR_FEATURES`` (LLVM names) an LLVM target's code may use; [] for another kind."""
    if target.kind.name != "llvm":
        return []
    have = cpu_features(target)
    return [f for f in VECTOR_FEATURES if f in have]


def target_json(target: Target) -> str:
    return json.dumps(json.loads(str(target)), sort_keys=True)


def make_target(spec: str, n_threads: int | None = None) -> Target:
    """A full target from a name: 'llvm' (this CPU, explicit mcpu), 'aarch64[:mcpu]', 'cuda', 'sm_80' or
    'cuda:sm_80' (that architecture with its GPU's limits), a TVM tag ('nvidia/nvidia-h200') or a JSON dict."""
    spec = spec.strip()
    try:
        if spec.startswith("{"):
            config = json.loads(spec)
            check_depth(config, f"--target {_quoted(spec)}", TARGET_HINT)  # TVM's parser recurses
            return _with_cuda_limits(config)
        name = TARGET_ALIASES.get(spec, spec)
        if name == "llvm":
            return host_target(n_threads)
        arch = name.removeprefix("cuda:")
        if arch.startswith("sm_"):
            return cuda_arch_target(arch)
        if name.split(":")[0] in CROSS_CPUS:
            return cross_cpu_target(name, n_threads)
        return Target(name)
    except UserInputError:
        raise
    except (ValueError, RuntimeError, TypeError, AttributeError, json.JSONDecodeError) as err:
        raise UserInputError(f"unknown target {_quoted(spec)}: {TARGET_HINT}") from err


def _quoted(spec: str, limit: int = 200) -> str:
    """``spec`` quoted for an error line, its middle cut where it is longer than ``limit`` characters."""
    return repr(spec) if len(spec) <= limit else f"{spec[:limit // 2]!r}...{spec[-limit // 4:]!r}"


def host_target(n_threads: int | None = None) -> Target:
    """This CPU: LLVM's name for it, plus the instruction sets it reports that LLVM's model of that name lacks
    (``host_features``: a VM's CPU model is often older than its features), ``n_threads`` cores."""
    config: dict[str, Any] = {"kind": "llvm", "mcpu": host_cpu(), "num-cores": resolve_threads(n_threads)}
    if features := host_features():
        config["mattr"] = features
    return Target(config)


def other_thread_counts(target: Target, known: Iterable[str]) -> list[tuple[Target, int]]:
    """``target`` at each other thread count found among the ``known`` target JSONs (e.g. the database's tasks'),
    nearest first (ties: more threads): the same CPU, whose schedules are valid here too."""
    if "num-cores" not in target.attrs:
        return []
    mine = json.loads(str(target))
    rest = {k: v for k, v in mine.items() if k != "num-cores"}
    counts = set()
    for text in set(known):
        theirs = json.loads(text)
        n = theirs.pop("num-cores", None)
        if isinstance(n, int) and n != mine["num-cores"] and theirs == rest:
            counts.add(n)
    ordered = sorted(counts, key=lambda n: (abs(n - mine["num-cores"]), -n))
    return [(Target({**mine, "num-cores": n}), n) for n in ordered]


def other_cpus(target: Target, known: Iterable[str]) -> list[Target]:
    """The other CPUs of the target's architecture among the ``known`` target JSONs (e.g. the database's tasks'),
    each at its own thread count: those with the target's vector width first, then the nearest thread count.
    Their schedules replay here (built for this CPU); whether they are fast here has to be measured."""
    if target.kind.name != "llvm":
        return []
    from autosched._tvm import llvm_vector_bits

    mine = json.loads(str(target))
    mine.pop("num-cores", None)
    found = []
    for text in sorted(set(known)):
        try:
            theirs = json.loads(text)
            other = Target(theirs)
        except (ValueError, TypeError, RuntimeError):
            continue
        theirs.pop("num-cores", None)
        if other.kind.name == "llvm" and theirs != mine and _triple_arch(other) == _triple_arch(target) \
                and _known_cpu(other):
            found.append(other)
    bits, n = llvm_vector_bits(target), int(target.attrs.get("num-cores", 1))
    return sorted(found, key=lambda t: (llvm_vector_bits(t) != bits, abs(int(t.attrs.get("num-cores", 1)) - n)))


def _known_cpu(target: Target) -> bool:
    """Whether LLVM knows the target's ``mcpu`` for its triple (this machine's where it names none): a target
    tuned natively on another architecture names no triple either."""
    codegen = tvm.target.codegen
    triple = str(target.attrs.get("mtriple", "") or codegen.llvm_get_system_triple())
    return bool(codegen.llvm_is_valid_cpu(str(target.attrs.get("mcpu", "generic")), triple))


def cuda_arch_target(arch: str) -> Target:
    """A CUDA target for ``arch`` ('sm_80', 'sm_90a') with the limits of the tagged GPU of that architecture."""
    if arch not in CUDA_ARCH_TAGS and arch not in CUDA_ARCH_SPECIFIC:
        raise UserInputError(f"unknown CUDA architecture {arch!r}: known {', '.join(CUDA_ARCH_TAGS)}, "
                             f"{', '.join(CUDA_ARCH_SPECIFIC)} (or give a TVM tag such as nvidia/nvidia-a100)")
    base = CUDA_ARCH_TAGS[arch.removesuffix("a")]
    config = {k: v for k, v in json.loads(str(Target(base))).items() if k != "tag"}
    return Target({**config, "arch": arch})


def max_dynamic_shared_memory(target: Target) -> int:
    """The bytes of dynamic shared memory a block of ``target`` may use (the opt-in limit of its architecture);
    the target's own ``max_shared_memory_per_block`` for an architecture not listed."""
    arch = str(target.attrs.get("arch", "")).removesuffix("a")
    return CUDA_MAX_DYNAMIC_SHARED.get(arch, int(target.attrs.get("max_shared_memory_per_block", 0)))


def _with_cuda_limits(config: dict[str, Any]) -> Target:
    """A JSON target; a CUDA one of a known arch gets its GPU's limits where it lacks them (VerifyGPUCode
    needs them)."""
    arch = str(config.get("arch", ""))
    if config.get("kind") == "cuda" and arch.removesuffix("a") in CUDA_ARCH_TAGS:
        tag = json.loads(str(Target(CUDA_ARCH_TAGS[arch.removesuffix("a")])))
        config = {**{k: tag[k] for k in CUDA_LIMIT_KEYS if k in tag}, **config}
    return Target(config)


def cross_cpu_target(name: str, n_threads: int | None = None) -> Target:
    """'aarch64' or 'aarch64:<mcpu>': an LLVM target for that triple (code generation here, building needs
    its cross compiler: ``export_compiler``); ``n_threads`` is the device's core count."""
    family, _, mcpu = name.partition(":")
    triple, default_cpu, mattr = CROSS_CPUS[family]
    if mcpu and mcpu not in llvm_cpus(triple):
        raise UserInputError(f"unknown {family} CPU {mcpu!r} for LLVM: e.g. neoverse-n1, neoverse-v1, neoverse-v2, "
                             "cortex-a72, cortex-a76, apple-a14 (M1), apple-m4")
    return Target({"kind": "llvm", "mtriple": triple, "mcpu": mcpu or default_cpu, "mattr": mattr,
                   "num-cores": resolve_threads(n_threads)})


def _triple_arch(target: Target) -> str:
    """The architecture of an LLVM target's triple ('aarch64'); '' for this machine's (no mtriple) or a GPU's."""
    return str(target.attrs.get("mtriple", "") or "").split("-")[0] if target.kind.name == "llvm" else ""


def _is_host_arch(arch: str) -> bool:
    here = platform.machine()
    return arch in ("", here) or {arch, here} <= {"aarch64", "arm64"} or {arch, here} <= {"x86_64", "amd64"}


def device_kind(target: Target) -> str:
    """The TVM device that runs the target's kernels: 'cpu' for an LLVM target, else the target's kind ('cuda')."""
    return "cpu" if target.kind.name == "llvm" else target.kind.name


def device_of(target_json: str) -> Any:
    """The device a build for ``target_json`` (a target as JSON) runs on, number 0 of its ``device_kind``; this CPU
    for text that is not a target."""
    try:
        return tvm.device(device_kind(Target(json.loads(target_json))), 0)
    except (ValueError, TypeError, AttributeError, RuntimeError):
        return tvm.cpu(0)


def has_device(kind: str) -> bool:
    """Whether this machine has a device of that kind ('cuda': a CUDA driver, libcuda, and a GPU)."""
    if kind == "cpu":
        return True
    if kind == "cuda" and ctypes.util.find_library("cuda") is None:
        return False
    try:
        return bool(tvm.device(kind, 0).exist)
    except (ValueError, RuntimeError):  # a device kind this TVM build does not know
        return False


def runs_here(target: Target) -> bool:
    """Whether this machine can run the target's code: an LLVM target for this machine's architecture whose
    instruction sets this CPU has (``missing_features``), or a GPU target where such a GPU is present. The one
    rule for every execution on this machine: code built for a target that fails it is never run here."""
    if target.kind.name == "llvm":
        return _is_host_arch(_triple_arch(target)) and not missing_features(target)
    return has_device(device_kind(target))


def copy_bandwidth_for(target: Target) -> float | None:
    """This machine's copy bandwidth (bytes/s, ``bandwidth.copy_bandwidth``) at the target's thread count, for a
    target of this CPU; None for another CPU's or a GPU's (this machine's says nothing of theirs)."""
    if target.kind.name != "llvm" or target.attrs.get("mcpu") != host_cpu() or not runs_here(target):
        return None
    return copy_bandwidth(int(target.attrs.get("num-cores", 1)))


def why_not_here(target: Target) -> str:
    """Why this machine cannot run the target's code, in words ('' where it can)."""
    if runs_here(target):
        return ""
    if target.kind.name != "llvm":
        return f"this machine has no {device_kind(target)} device"
    if not _is_host_arch(_triple_arch(target)):
        return f"this machine is not {target.attrs['mtriple']}"
    return f"this CPU lacks {', '.join(missing_features(target))}"


def require_runs_here(target: Target, what: str = "code built for it") -> None:
    """A one-line UserInputError unless this machine can run the target's code (``runs_here``)."""
    if reason := why_not_here(target):
        raise UserInputError(f"{what} cannot run here ({reason}, which {_describe(target)} uses): run it on such a "
                             "machine, or build with --target llvm for this one")


def _describe(target: Target) -> str:
    mcpu = target.attrs.get("mcpu", "")
    return f"the target {target.kind.name}{' ' + str(mcpu) if mcpu else ''}"


def host_execution_target(target: Target) -> Target:
    """The target to build for where code must run on this machine (calibration, references): ``target`` itself
    where it runs here, else this CPU's target at the same thread count."""
    if target.kind.name == "llvm" and runs_here(target):
        return target
    n_threads = target.attrs.get("num-cores") if target.kind.name == "llvm" else None
    return host_target(int(n_threads) if n_threads else None)


def use_nvcc_without_nvrtc() -> None:
    """On a GPU machine TVM compiles CUDA kernels at build time with NVRTC, which needs the cuda-bindings package
    (``pip install 'autosched[cuda]'``); without it, and with nvcc on PATH, use nvcc instead (set before worker
    processes start: they inherit it). A user's own TVM_CUDA_COMPILE_MODE is left alone."""
    import importlib.util

    if "TVM_CUDA_COMPILE_MODE" in os.environ or shutil.which("nvcc") is None:
        return
    try:
        has_nvrtc = importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:  # no 'cuda' package at all
        has_nvrtc = False
    if not has_nvrtc:
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"


def check_measurable(target: Target, remote: bool = False) -> Target:
    """``target`` if its kernels can be measured: here, or (``remote``) on RPC devices; else a one-line
    UserInputError saying where to measure instead."""
    if not remote and _triple_arch(target) and not _is_host_arch(_triple_arch(target)):
        raise UserInputError(f"this machine cannot run code for {target.attrs['mtriple']}: tune and run on such a "
                             "machine, or measure on one through --rpc HOST:PORT --key KEY")
    if remote and target.kind.name == "llvm":
        export_compiler(target)  # candidates are linked here: its cross compiler must be installed
    if not remote and target.kind.name == "llvm" and not runs_here(target):
        raise UserInputError(f"measuring for {_describe(target)} needs a CPU with {', '.join(missing_features(target))}"
                             ", which this one lacks: tune on such a machine, through --rpc HOST:PORT --key KEY, or "
                             "for --target llvm (this CPU)")
    if not remote and not runs_here(target):
        kind = device_kind(target)
        raise UserInputError(f"measuring on {kind} needs a {kind} device, and this machine has none: tune on a "
                             f"machine with one, or measure on one through --rpc HOST:PORT --key KEY")
    if target.kind.name == "cuda":
        use_nvcc_without_nvrtc()
    return target


def export_compiler(target: Target) -> Callable[..., Any] | None:
    """The ``fcompile`` that ``export_library`` needs for the target's host code: None (the system compiler)
    for this machine's architecture; the cross compiler for another; a one-line UserInputError naming the tool
    when it is not installed."""
    arch = _triple_arch(target)
    if _is_host_arch(arch):
        return None
    tool = CROSS_COMPILERS.get(arch)
    if tool is None:
        raise UserInputError(f"building for {target.attrs['mtriple']} needs a cross compiler autosched does not "
                             f"know; known: {', '.join(CROSS_COMPILERS.values())}")
    if shutil.which(tool) is None:
        raise UserInputError(f"building for {target.attrs['mtriple']} needs the cross compiler {tool}, which is not "
                             f"on PATH (Debian/Ubuntu: apt-get install gcc-{arch}-linux-gnu)")
    return cross_compiler(tool)
