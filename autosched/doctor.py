"""This machine as autosched sees it (``autosched doctor``): the CPU and its vector extensions, the LLVM target and
thread count autosched uses here, the versions of TVM and the optional libraries, a GPU and nvcc where present,
and which tuning records (the shipped logs, a given database) apply here, and why the others do not.

Only records measured with this TVM release (major.minor) are used. A record is a schedule, not code: those of this
CPU's own target are applied as they are (at another thread count they are borrowed); those of another CPU of this
architecture are replayed, built for this CPU and timed against the default schedules at compile time
(``scheduler.foreign``), whatever that CPU's extensions; those of another architecture, of an unknown CPU, or of a
GPU this machine does not have never apply here; a GPU target's records apply to builds for that target where its
device is present.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autosched.db import Database, display_name, open_database

# Libraries whose versions the doctor shows: distribution name -> how it is shown
LIBRARIES = {"apache-tvm": "TVM", "torch": "torch", "onnxruntime": "onnxruntime", "onnx": "onnx", "optuna": "optuna",
             "xgboost": "xgboost", "numpy": "numpy"}
NOT_INSTALLED = "not installed"

# What a record is here: applied as it is, timed against the default schedules when compiling, or not used
APPLIES, TIMED, NOT_HERE = "applies", "timed here", "does not apply"
THIS_TARGET = "this CPU's target"
OTHER_THREADS = "this CPU's target at another thread count (borrowed)"
OTHER_CPU = "another CPU's: rebuilt for this one, timed when compiling"
TIMED_MEANS = ("timed: another CPU's schedules, of this architecture, are replayed and built for this CPU, then timed "
               "against the default schedules when compiling (those calling that CPU's own tensor intrinsics are "
               "skipped); each group keeps the fastest")
GPU_TARGET = "a GPU target whose device is here: applies to builds for that target"
LOG_SUFFIXES = (".jsonl.gz", ".jsonl", ".db")


@dataclass
class CPU:
    vendor: str
    model: str
    llvm_cpu: str
    vector_bits: int
    flags: dict[str, bool]  # targets.VECTOR_FEATURES' names -> present ({} where LLVM cannot read this CPU)
    cores: int


@dataclass
class Applicability:
    """How many of a database's records apply here, and why the others do not (reason -> records)."""

    name: str
    n_records: int
    reasons: dict[str, int] = field(default_factory=dict)  # why -> records, most first
    kinds: dict[str, str] = field(default_factory=dict)  # why -> APPLIES | TIMED | NOT_HERE

    def count(self, kind: str) -> int:
        return sum(n for why, n in self.reasons.items() if self.kinds[why] == kind)

    @property
    def n_applying(self) -> int:
        return self.count(APPLIES)

    @property
    def n_usable(self) -> int:
        """Records applied here, or timed here at compile time (another CPU's that runs here)."""
        return self.n_applying + self.count(TIMED)


def cpu_info() -> CPU:
    """This CPU: vendor and model (``/proc/cpuinfo``, else the platform's), LLVM's name for it, its widest vector
    and its vector and matrix extensions (as LLVM reads them: ``_tvm.host_isa``)."""
    from autosched._tvm import host_cpu, host_isa, llvm_vector_bits
    from autosched.config import resolve_threads
    from autosched.targets import VECTOR_FEATURES, host_target

    fields = _proc_cpuinfo()
    isa = host_isa()
    flags = {name: bool(isa.get(f)) for f, name in VECTOR_FEATURES.items()} if isa else {}
    return CPU(vendor=fields.get("vendor_id") or platform.machine(),
               model=fields.get("model name") or platform.processor() or platform.machine(),
               llvm_cpu=host_cpu(), vector_bits=llvm_vector_bits(host_target(1)), flags=flags,
               cores=resolve_threads())


def _proc_cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` ({} elsewhere than on Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines()) if _}


def versions() -> dict[str, str]:
    """autosched's, Python's, and each of ``LIBRARIES``' (``not installed`` for a missing one)."""
    from autosched.version import __version__

    found = {"autosched": __version__, "Python": platform.python_version()}
    for dist, shown in LIBRARIES.items():
        try:
            found[shown] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[shown] = NOT_INSTALLED
    return found


def gpus() -> list[str]:
    """Each NVIDIA GPU as ``nvidia-smi`` names it (name, driver, memory); [] without nvidia-smi or a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    text = _output([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    return [line.strip() for line in text.splitlines() if line.strip()] if text else []


def nvcc() -> dict[str, str] | None:
    """nvcc's path and release (``nvcc --version``'s last line naming it); None where it is not on PATH."""
    path = shutil.which("nvcc")
    if path is None:
        return None
    text = _output([path, "--version"]) or ""
    release = re.search(r"release [^\n]*", text)
    return {"path": path, "version": release.group(0) if release else (text.strip().splitlines() or ["?"])[-1]}


def _output(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def host_target_json(n_threads: int | None = None) -> str:
    from autosched.targets import host_target, target_json

    return target_json(host_target(n_threads))


def applicability(db: Database, name: str, n_threads: int | None = None) -> Applicability:
    """How many of ``db``'s records apply here (``n_threads``: the thread count of this CPU's target; default all
    cores), and why the others do not."""
    reasons: Counter = Counter()
    kinds: dict[str, str] = {}
    records = db.records()
    verdicts: dict[tuple[str, str], tuple[str, str]] = {}  # (target, TVM release) -> verdict: a log has few targets
    here = host_target_json(n_threads)
    for r in records:
        release = ".".join(r.tvm_version.split(".")[:2])
        if (r.target, release) not in verdicts:
            verdicts[r.target, release] = record_verdict(r.target, r.tvm_version, here)
        kind, why = verdicts[r.target, release]
        reasons[why] += 1
        kinds[why] = kind
    return Applicability(name, len(records), dict(reasons.most_common()), kinds)


def record_verdict(tjson: str, tvm_version: str, here: str) -> tuple[str, str]:
    """Whether a record of target ``tjson`` measured with ``tvm_version`` applies here (``here``: this CPU's target
    JSON): (``APPLIES`` | ``TIMED`` | ``NOT_HERE``, why in words, naming the record's CPU)."""
    from autosched._tvm import TVM_VERSION, Target
    from autosched.session import same_release
    from autosched.targets import other_cpus, runs_here, target_json, why_not_here

    if not same_release(tvm_version, TVM_VERSION):
        return NOT_HERE, f"measured with TVM {'.'.join(tvm_version.split('.')[:2])} (this is {TVM_VERSION})"
    try:
        target = Target(json.loads(tjson))
    except (ValueError, TypeError, RuntimeError):
        return NOT_HERE, "a target this TVM does not read"
    mine, theirs = json.loads(here), json.loads(target_json(target))
    threads = f", {theirs['num-cores']} thread(s)" if "num-cores" in theirs else ""
    name = f"{theirs.get('mcpu') or target.kind.name}{threads}"
    if theirs == mine:
        return APPLIES, f"{name}: {THIS_TARGET}"
    if {k: v for k, v in theirs.items() if k != "num-cores"} == {k: v for k, v in mine.items() if k != "num-cores"}:
        return APPLIES, f"{name}: {OTHER_THREADS}"
    if other_cpus(Target(mine), [tjson]):  # a schedule, not code: replayed and built for this CPU
        lacking = f"; built for {name.split(',')[0]}, code would not run here ({why_not_here(target)})" \
            if not runs_here(target) else ""
        return TIMED, f"{name}: {OTHER_CPU}{lacking}"
    if target.kind.name == "llvm" or not runs_here(target):
        return NOT_HERE, f"{name}: {why_not_here(target) or 'a CPU LLVM does not know'}"
    return APPLIES, f"{name}: {GPU_TARGET}"


def shipped_logs() -> list[Path]:
    """The tuning logs shipped with autosched (``tuning_logs/``: exports and databases)."""
    from autosched.paths import data_dir

    try:
        folder = data_dir("tuning_logs")
    except FileNotFoundError:
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(LOG_SUFFIXES))


def database_applicability(path: str, name: str | None = None, n_threads: int | None = None) -> Applicability:
    """``applicability`` of the database or export at ``path`` (opened read-only)."""
    with open_database(path, read_only=True) as db:
        return applicability(db, display_name(name or path), n_threads)


def diagnose(db: str | None = None, db_name: str | None = None, logs: bool = True) -> dict[str, Any]:
    """Everything the doctor says, as plain data (what ``--json`` prints)."""
    from autosched._tvm import Target
    from autosched.config import resolve_threads

    here = host_target_json()
    report: dict[str, Any] = {
        "cpu": asdict(cpu_info()),
        "target": {"json": here, "string": str(Target(json.loads(here))), "llvm": llvm_flags(json.loads(here))},
        "threads": resolve_threads(), "versions": versions(), "gpus": gpus(), "nvcc": nvcc()}
    if logs:
        report["shipped_logs"] = [_as_dict(database_applicability(str(p), p.name)) for p in shipped_logs()]
    if db is not None:
        report["database"] = _as_dict(database_applicability(db, display_name(db_name or db)))
    return report


def llvm_flags(target: dict[str, Any]) -> str:
    """An LLVM target as flags: ``llvm -mcpu=znver4 -mattr=+avx512bf16 -num-cores=2``."""
    parts = [str(target.get("kind", "llvm"))]
    parts += [f"-mtriple={target['mtriple']}"] if target.get("mtriple") else []
    parts += [f"-mcpu={target['mcpu']}"] if target.get("mcpu") else []
    parts += [f"-mattr={','.join(target['mattr'])}"] if target.get("mattr") else []
    parts += [f"-num-cores={target['num-cores']}"] if "num-cores" in target else []
    return " ".join(parts)


def _as_dict(a: Applicability) -> dict[str, Any]:
    return {**asdict(a), "applying": a.n_applying, "usable": a.n_usable}
