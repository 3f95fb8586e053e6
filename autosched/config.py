"""Tuning configuration: one frozen dataclass with documented defaults; a TOML file and CLI flags override."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from autosched.errors import UserInputError

TIMING_CONDITIONS = ("warm", "flush", "rotate")  # autosched.measure.worker's, named here for the config's check
COST_MODELS = ("xgb", "random", "none")  # what screens the sampler's proposals before measuring
DEFAULT_DATABASE = "tuning_logs/autosched.db"  # where tune writes, unless told (--db, db=)
NO_TRIAL_LIMIT = 10**9  # n_trials=0 with a time budget: the clock decides


def resolve_threads(n_threads: int | None = None) -> int:
    """The thread count autosched uses for ``n_threads``: itself if given, else (None or 0) all cores. The one
    place where "0 = all cores" is decided."""
    return n_threads or os.cpu_count() or 1
_SECONDS_PER = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class TuneConfig:
    n_trials: int = 64  # measured candidates per task (total, including earlier runs on the same database);
    # 0 = no limit (a model tuned with a time budget)
    time_budget_s: float = 0.0  # wall time of the whole run (a model's: untuned baselines included); 0 = none
    cheap_share: float = 0.01  # models: of the tasks whose pattern is cheap (elementwise, broadcast, injective, or
    # a reduction under 1 MFLOP), the smallest, while their shares of the estimate (weight x measured latency:
    # untuned, then the default schedule's) add up to under this, get their default schedule, measured once,
    # instead of a search; 0 = search every task
    batch_size: int = 8  # candidates proposed, built in parallel, then measured one by one
    sampler: str = "tpe"  # tpe | random | cmaes | gp | nsga2
    seed: int = 0  # drives the sampler, the design spaces and the random inputs
    n_threads: int = 0  # CPU threads of the measured kernels; 0 = all cores
    n_build_workers: int = 0  # 0 = all cores
    build_timeout_s: float = 0.0  # slower compiles count as failures; 0 = by target (build_timeout_for)
    run_timeout_s: float = 30.0
    repeat: int = 3  # timed repeats per candidate (median reported)
    min_repeat_ms: int = 25  # each repeat runs the kernel until this much time has passed
    timing_condition: str = ""  # CPU: how the caches stand when a candidate is timed, one of TIMING_CONDITIONS:
    # "warm" (each run right after the last), "flush" (every argument but the first flushed from the caches before
    # each run, as MetaSchedule's enable_cpu_cache_flush), "rotate" (every argument but the first on its own copy
    # per run, copies through twice the last-level cache). "" (default): chosen by ``for_model`` for a model's
    # tasks, warm for one operator
    flush_cache: bool | None = None  # older name: true = timing_condition "flush", false = "warm"
    relatives: int = 0  # models: at a task's first search round, queue the best schedules of up to this many
    # tasks of the model with a design in common at other sizes (convolutions of other channel counts), refitted
    # (TraceSearchSpace.transfer_params); 0 = off
    microkernel_seeds: int = 4  # models, CPU: at a float32 matmul's or convolution's first search round, queue up to
    # this many settings shaped like a BLAS micro-kernel (autosched/spaces/microkernel.py); 0 = off
    in_model: int = 4  # models, CPU: at the end of a run, up to this many schedules of each of the heaviest tasks
    # (the best as timed alone) are timed inside the model, and the combination that makes the model fastest is
    # kept (deploy/in_model.py; with a time budget, only where it leaves time for it); 0 = off
    cutoff_ratio: float = 3.0  # a candidate whose first run is this much slower than the best is timed once
    cost_model: str = "xgb"  # one of COST_MODELS: screens the sampler's proposals before measuring
    transfer: bool = True  # start from the shipped cross-task model (cost_models/<target kind>) if one fits
    transfer_model: str = ""  # another saved model folder to start from ("" = the shipped one)
    pool_factor: int = 4  # proposals ranked per measured candidate
    explore: float = 0.125  # share of each batch picked at random (designs the model ranks low get their own share)
    rtol: float = 1e-3  # output check against the reference
    atol: float = 1e-4  # relative to the largest reference value
    rpc: str = ""  # HOST:PORT of a TVM RPC tracker: measure on its devices ("" = on this machine)
    rpc_key: str = ""  # with rpc: the key the devices registered under (rpc_server --key)

    def build_timeout_for(self, device: str) -> float:
        """The build timeout on ``device`` ('cpu', 'cuda', ...): the configured one, else 3 s on a CPU (a compile
        takes 0.05-0.5 s, median 0.1) and 30 s on a GPU (each build also runs NVRTC or nvcc on its kernels: ~1 s
        alone, more with a build per core at once; at 3 s an H200 run measured nothing)."""
        if self.build_timeout_s > 0:
            return self.build_timeout_s
        return 3.0 if device == "cpu" else 30.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # a config file or an API call can give any value: check each
            value = getattr(self, f.name)
            if value is None:  # not given: the default
                object.__setattr__(self, f.name, f.default)
            else:
                _check_field(f.name, value, f.default)
        budget, share = self.time_budget_s, self.cheap_share
        if not isinstance(budget, int | float) or not 0 <= budget < math.inf:
            raise UserInputError(f"time_budget_s must be a number of seconds >= 0 (0 = none), got {budget!r}")
        if not isinstance(share, int | float) or not 0 <= share < 1:
            raise UserInputError(f"cheap_share must be a number in [0, 1), got {share!r}")
        _ = self.tracker  # a malformed address is refused here
        if self.timing_condition not in ("", *TIMING_CONDITIONS):
            raise UserInputError(f"config: timing_condition must be one of {', '.join(TIMING_CONDITIONS)} (or unset), "
                                 f"got {self.timing_condition!r}")
        if bool(self.rpc) != bool(self.rpc_key):
            raise UserInputError("config: rpc (--rpc HOST:PORT) and rpc_key (--key KEY) go together: give both "
                                 "to measure on a tracker's devices, or neither to measure here")

    @property
    def condition(self) -> str:
        """The timing condition the runners use (``timing_condition``, else the older ``flush_cache``, else warm)."""
        if self.timing_condition:
            return self.timing_condition
        return "flush" if self.flush_cache else "warm"

    def for_model(self) -> TuneConfig:
        """The config for tuning a model's tasks: unless set, the timing condition is "flush" (weights and outputs out
        of the caches before each run). Inside a model a kernel finds its weights out of the caches (the other layers'
        went through them since its last call). At 1 thread BERT tuned warm ran its kernels 1.32x slower in the model
        than their tuned times; tuned flushed, the model ran 0.84x the time (one process, interleaved; 0.97x over four
        models). At 2 threads flushed tuning is neutral on models whose weights fit the cache (ResNet-50 1.01x and
        1.03x, BERT 1.03x and 0.96x, GPT-2 1.005x the warm-tuned model's time, two machines) and faster where they do
        not (segmentation UNet, 55 MB of weights: 0.95x), and choosing a task's schedule by flushed time costs the
        model less than by warm time (2.5 % against 5.2 %, bench/results/conditions3_t2). One operator tuned alone is
        timed warm, as a benchmark times it."""
        if self.timing_condition or self.flush_cache is not None:
            return self
        return dataclasses.replace(self, timing_condition="flush")

    @cached_property
    def tracker(self) -> tuple[str, int] | None:
        """(host, port) of the RPC tracker ``rpc`` names, parsed once; None: measure on this machine."""
        return parse_tracker_address(self.rpc) if self.rpc else None

    @property
    def threads(self) -> int:
        return resolve_threads(self.n_threads)

    @property
    def trial_limit(self) -> int:
        """Measured candidates per task: ``n_trials``, or no limit where it is 0 (a time budget decides)."""
        return self.n_trials or NO_TRIAL_LIMIT

    def replace(self, **changes: Any) -> TuneConfig:
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_toml(cls, path: str | Path) -> TuneConfig:
        """The config in TOML file ``path``: its fields at the top level, or all of them in one ``[tune]`` table
        (then nothing else at the top level). Read at most ``CONFIG_MAX_BYTES``; anything else is one line."""
        from autosched.bounded import check_depth, decode, read_capped

        fix = "give a TOML file of TuneConfig fields, at its top level or under [tune]"
        try:
            raw = tomllib.loads(decode(read_capped(path, CONFIG_MAX_BYTES, f"config {path}", fix),
                                       f"config {path}", fix))
        except (OSError, ValueError) as err:  # ValueError: TOMLDecodeError, or an integer of over 4300 digits
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)[:200]
            raise UserInputError(f"cannot read config {path}: {why}: {fix}") from err
        except RecursionError as err:
            raise UserInputError(f"config {path} nests too deeply to read: {fix}") from err
        check_depth(raw, f"config {path}", fix)
        table = raw.get("tune", raw)
        if not isinstance(table, dict):
            raise UserInputError(f"config {path}: tune must be a table ([tune] followed by its keys), got "
                                 f"{type(table).__name__}: {fix}")
        outside = sorted(set(raw) - {"tune"}) if "tune" in raw else []
        if outside:
            raise UserInputError(f"config {path}: keys {outside} are outside its [tune] table, which would ignore "
                                 "them: put every key under [tune], or drop the [tune] header")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(table) - names)
        if unknown:
            raise UserInputError(f"config {path}: unknown keys {unknown}; valid keys: {sorted(names)}")
        return cls(**table)


CONFIG_MAX_BYTES = 1 << 20  # a config is a few hundred bytes; more is not one


_LOWEST = {"batch_size": 1, "repeat": 1, "pool_factor": 1}  # everything else numeric: >= 0
_POSITIVE = {"run_timeout_s"}
_HIGHEST = {"seed": 2**32 - 1, "explore": 1}  # numpy seeds are 32-bit; explore is a share


def _check_field(name: str, value: Any, default: Any) -> None:
    """``value`` has the type of the field's default and lies in the field's range, else one clear line."""
    kind = type(default) if default is not None else bool  # None: an unset switch (see its field)
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not ok:
        raise UserInputError(f"config: {name} must be {_KIND_NAMES[kind]}, got {value!r}")
    if kind in (int, float):
        low, high = _LOWEST.get(name, 0), _HIGHEST.get(name, math.inf)
        if not low <= value <= high or (name in _POSITIVE and value <= 0):
            where = f"in [{low}, {high}]" if high < math.inf else ("> 0" if name in _POSITIVE else f">= {low}")
            raise UserInputError(f"config: {name} must be {where}, got {value!r}")


_KIND_NAMES = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false"}


def parse_tracker_address(text: str) -> tuple[str, int]:
    """(host, port) from ``HOST:PORT``; anything else: UserInputError."""
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserInputError(f"--rpc {text!r}: give the tracker's address as HOST:PORT, e.g. 127.0.0.1:9190")
    return host.strip("[]"), int(port)


def parse_duration(text: str, allow_zero: bool = False) -> float:
    """Seconds from ``90``, ``90s``, ``10m`` or ``1.5h`` (and ``0`` with ``allow_zero``); anything else, or a
    value not above 0 (below 0 with ``allow_zero``): UserInputError naming ``--time``."""
    seconds = _duration_s(text, allow_zero)
    if seconds is None:
        raise UserInputError(f"--time {text!r}: {_duration_hint(allow_zero)}")
    return seconds


def duration_type(allow_zero: bool = False) -> Callable[[str], float]:
    """``parse_duration`` as an argparse ``type=``: a bad value raises ArgumentTypeError, which argparse reports
    as its own error (``argument --time: ...``, then the parser's ``error()``) instead of a traceback."""

    def duration(text: str) -> float:
        seconds = _duration_s(text, allow_zero)
        if seconds is None:
            raise argparse.ArgumentTypeError(f"{text!r}: {_duration_hint(allow_zero)}")
        return seconds

    return duration


def _duration_s(text: str, allow_zero: bool) -> float | None:
    match = re.fullmatch(r"(\d+\.?\d*|\.\d+)([smh]?)", text.strip().lower())
    seconds = float(match[1]) * _SECONDS_PER[match[2]] if match else math.nan
    lowest_ok = 0 <= seconds if allow_zero else 0 < seconds
    return seconds if lowest_ok and seconds < math.inf else None


def _duration_hint(allow_zero: bool) -> str:
    what = "0 or a positive duration" if allow_zero else "a positive duration"
    return f"give {what} such as 90s, 10m or 1.5h (a plain number is seconds)"
