"""Search-space settings per target family, read from ``search_spaces/*.toml``."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autosched._tvm import IRModule, Target, ms
from autosched.codegen import fast_math
from autosched.errors import IncompatibleArtefactError, UserInputError
from autosched.paths import data_dir

SUPPORTED_ENCODINGS = {
    "tile": {"divisor_index"},
    "categorical": {"ordinal_index"},
    "compute_location": {"ordinal"},
    "design": {"categorical"},
}


@dataclass(frozen=True)
class SpaceSettings:
    name: str  # file stem, e.g. "cpu"
    version: int
    target_kinds: tuple[str, ...]
    rules: Any  # "from-target" or a list of rule tables
    postprocs: tuple[str, ...]
    knobs: dict[str, str]
    limits: dict[str, int] = field(default_factory=dict)
    checks: dict[str, int] = field(default_factory=dict)
    fast_math: tuple[str, ...] = ()  # float32 calls rewritten as vectorisable arithmetic (codegen/fast_math.py)
    fuse_epilogues: bool = False  # keep only the designs that fuse the most epilogues into their producer
    stream_reductions: bool = False  # one more design for reductions along a kept axis (spaces/streaming.py)
    partition_concats: bool = False  # one more design for concatenations (spaces/concat.py)
    serial_small: bool = False  # one more design for small functions: the default without threads (spaces/serial.py)
    row_reductions: bool = False  # one more design for norms and softmaxes (spaces/row_reduction.py)
    attention_blocks: bool = False  # one more design for a fused attention (spaces/attention.py)
    dlight_designs: bool = False  # CUDA: one more design, dlight's schedule (spaces/dlight_design.py)
    stream_injective: bool = False  # one more design for reshapes and transposes (spaces/injective.py)
    rule_defaults: bool = False  # a task's default schedule by its pattern (TraceSearchSpace.default_schedule)
    tensor_core_output: str = ""  # CUDA: where wmma designs stage their output ("shared"; "": TVM's choice)

    def prepare(self, mod: IRModule) -> IRModule:
        """The PrimFunc the space schedules: ``mod`` with the ``fast_math`` rewrite (itself if there is none)."""
        return fast_math.rewrite(mod, self.fast_math) if self.fast_math else mod

    def schedule_rules(self, target: Target | None = None) -> Any:
        """The rule list for ``target``: "from-target" (TVM's own for it, unless ``tensor_core_output`` changes
        its tensor-core rules: spaces/tensor_core.py), or the rules the file lists."""
        if self.rules == "from-target":
            if self.tensor_core_output and target is not None:
                from autosched.spaces.tensor_core import tensor_core_rules

                return tensor_core_rules(target, self.tensor_core_output) or "from-target"
            return "from-target"
        return [_make_rule(dict(r)) for r in self.rules]

    def make_postprocs(self) -> list:
        return [getattr(ms.postproc, name)() for name in self.postprocs]


def _make_rule(table: dict[str, Any]) -> Any:
    sr = ms.schedule_rule
    name = table.pop("name")
    if name == "multi_level_tiling":
        for key in ("reuse_read", "reuse_write"):
            if key in table:
                table[key] = sr.ReuseType(**table[key])
    makers = {
        "apply_custom_rule": sr.ApplyCustomRule,
        "inline_constant_scalars": sr.InlineConstantScalars,
        "auto_inline": sr.AutoInline,
        "add_rfactor": sr.AddRFactor,
        "multi_level_tiling": sr.MultiLevelTiling,
        "parallel_vectorize_unroll": sr.ParallelizeVectorizeUnroll,
        "random_compute_location": sr.RandomComputeLocation,
        "cross_thread_reduction": sr.CrossThreadReduction,
        "auto_bind": sr.AutoBind,
    }
    if name not in makers:
        raise IncompatibleArtefactError(f"search space rule {name!r} is unknown; valid: {', '.join(sorted(makers))}")
    return makers[name](**table)


def load_settings(path: Path) -> SpaceSettings:
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserInputError(f"cannot read search space {path}: {err}") from err
    try:
        return _settings(path, raw)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as err:  # a key missing or mistyped (inf)
        what = f"key {err.args[0]!r} is missing" if isinstance(err, KeyError) else f"a value has the wrong type ({err})"
        raise IncompatibleArtefactError(f"{path.name}: {what}: compare it with the search_spaces/ shipped with "
                                        "autosched") from err


def _settings(path: Path, raw: dict[str, Any]) -> SpaceSettings:
    knobs = dict(raw.get("knobs", {}))
    for kind, encoding in knobs.items():
        if encoding not in SUPPORTED_ENCODINGS.get(kind, ()):
            raise IncompatibleArtefactError(
                f"{path.name}: knob encoding {kind}={encoding!r} is not supported by this autosched; "
                f"use one of {sorted(SUPPORTED_ENCODINGS.get(kind, []))}"
            )
    return SpaceSettings(
        name=path.stem,
        version=int(raw["version"]),
        target_kinds=tuple(raw["target_kinds"]),
        rules=raw.get("rules", "from-target"),
        postprocs=tuple(raw["postprocs"]["names"]),
        knobs=knobs,
        limits=dict(raw.get("limits", {})),
        checks=_checks(path, raw.get("checks", {})),
        fast_math=_fast_math(path, raw.get("fast_math", {})),
        fuse_epilogues=bool(raw.get("designs", {}).get("fuse_epilogues", False)),
        stream_reductions=bool(raw.get("designs", {}).get("stream_reductions", False)),
        partition_concats=bool(raw.get("designs", {}).get("partition_concats", False)),
        serial_small=bool(raw.get("designs", {}).get("serial_small", False)),
        row_reductions=bool(raw.get("designs", {}).get("row_reductions", False)),
        attention_blocks=bool(raw.get("designs", {}).get("attention_blocks", False)),
        dlight_designs=bool(raw.get("designs", {}).get("dlight", False)),
        stream_injective=bool(raw.get("designs", {}).get("stream_injective", False)),
        rule_defaults=bool(raw.get("designs", {}).get("rule_defaults", False)),
        tensor_core_output=_tensor_core_output(path, raw.get("tensor_core", {})),
    )


def _tensor_core_output(path: Path, table: dict[str, Any]) -> str:
    scope = str(table.get("output_scope", ""))
    if scope not in ("", "shared", "shared.dyn"):
        raise IncompatibleArtefactError(f"{path.name}: [tensor_core] output_scope {scope!r}: use shared or shared.dyn")
    return scope


KNOWN_CHECKS = {"max_register_tile"}


def _checks(path: Path, table: dict[str, Any]) -> dict[str, int]:
    unknown = sorted(set(table) - KNOWN_CHECKS)
    if unknown:
        raise IncompatibleArtefactError(
            f"{path.name}: unknown checks {unknown}; this autosched knows {sorted(KNOWN_CHECKS)}"
        )
    return {k: int(v) for k, v in table.items()}


def _fast_math(path: Path, table: dict[str, Any]) -> tuple[str, ...]:
    ops = tuple(table.get("ops", ()))
    unknown = sorted(set(ops) - set(fast_math.FAST_OPS))
    if unknown:
        raise IncompatibleArtefactError(
            f"{path.name}: fast_math ops {unknown} are unknown; this autosched knows {sorted(fast_math.FAST_OPS)}"
        )
    return ops


SEARCH_SPACES_ENV = "AUTOSCHED_SEARCH_SPACES"  # a folder of *.toml used instead of the shipped search_spaces/


def settings_for(target: Target, folder: Path | None = None) -> SpaceSettings:
    """The settings whose ``target_kinds`` contains the target's kind, from ``folder``, else the folder named by
    ``$AUTOSCHED_SEARCH_SPACES``, else the shipped ``search_spaces/``."""
    folder = folder or (Path(os.environ[SEARCH_SPACES_ENV]) if os.environ.get(SEARCH_SPACES_ENV)
                        else data_dir("search_spaces"))
    for path in sorted(folder.glob("*.toml")):
        settings = load_settings(path)
        if target.kind.name in settings.target_kinds:
            return settings
    raise UserInputError(f"no search space in {folder} supports target kind {target.kind.name!r}")
