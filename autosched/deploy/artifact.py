"""A tuned model as one artifact: its compiled library with the signature, target, versions and tuning provenance.

``save_artifact(compiled, path, db)`` writes it as a zip file (``model.autosched``), or as a folder where ``path``
ends in ``/`` or is an existing folder; both hold the same files:

- ``model.so`` and ``model.so.json``: the library and its metadata (``CompiledModel.export_library``),
- ``manifest.json``: format and schema version, the input and output signature, the target (its JSON, its
  string, LLVM ``-mcpu``/``-mattr`` and the vector extensions its code may use), the versions that built it
  (autosched, TVM, Python) and the tuning provenance (the database, without a password; per fusion group its
  task key, tuned / default / transferred / ..., how many records the database held for it and the newest one's
  time).

``load_artifact(path)`` reads the manifest first and refuses, in one line, a host that cannot run the code (a CPU
without an extension the target uses, another architecture, no GPU) or another TVM release (major.minor: the
runtime the library was built against), before it loads anything; then it is ``load_compiled``'s
``CompiledModel``: numpy arrays in, numpy arrays out.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import weakref
import zipfile
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autosched.bounded import (
    META_MAX_BYTES,
    MiB,
    copy_capped,
    inside,
    loads_json,
    plain_name,
    read_capped,
    read_capped_stream,
    read_json,
    safe_member_name,
)
from autosched.db import Database, display_name
from autosched.deploy.build import CompiledModel
from autosched.errors import IncompatibleArtefactError, UserInputError
from autosched.masking import mask_argv, mask_secrets
from autosched.scratch import scratch_dir

FORMAT = "autosched-artifact"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
LIBRARY = "model.so"  # in the artifact; its metadata is LIBRARY + ".json"
SUFFIX = ".autosched"
BUILD_HINT = "build one with autosched compile MODEL --db DB -o model.autosched"


def is_folder_path(path: str | Path) -> bool:
    """Whether ``save_artifact`` writes ``path`` as a folder: it ends in ``/`` or is an existing folder."""
    return str(path).endswith(("/", os.sep)) or Path(path).is_dir()


def looks_like_artifact(path: str | Path) -> bool:
    """Whether ``path`` is meant as an artifact (to be loaded as one, with its errors): a name ending in
    ``.autosched``, a folder holding a manifest, or a zip file."""
    p = Path(path)
    return (str(path).rstrip("/" + os.sep).endswith(SUFFIX) or (p / MANIFEST).is_file()
            or (p.is_file() and zipfile.is_zipfile(p)))


def save_artifact(compiled: CompiledModel, path: str | Path, db: str | Database | None = None,
                  command: list[str] | None = None, db_name: str | None = None) -> Path:
    """Write ``compiled`` (a ``CompiledModel``) with its manifest to ``path``: a zip file, or a folder
    (``is_folder_path``). ``db``: the database its schedules came from (provenance), named ``db_name`` (default:
    its own display name, without a password); ``command``: the command line that built it."""
    if not isinstance(compiled, CompiledModel):
        raise UserInputError("an artifact holds one build: a model with --shape-buckets is written as libraries "
                             "(-o PATH.so)")
    as_folder, path = is_folder_path(path), Path(path)  # Path drops a trailing slash
    manifest = build_manifest(compiled, db, command, db_name)
    if as_folder:
        path.mkdir(parents=True, exist_ok=True)
        _write_files(compiled, manifest, path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with scratch_dir("artifact") as tmp:
        _write_files(compiled, manifest, Path(tmp))
        partial = path.with_name(path.name + ".partial")
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
                for f in sorted(Path(tmp).iterdir()):
                    zf.write(f, f.name)
            partial.replace(path)  # a reader never sees half a file
        except BaseException:  # a failed write (disk full, Ctrl-C) leaves the old artifact, and no *.partial
            partial.unlink(missing_ok=True)
            raise
    return path


def _write_files(compiled: CompiledModel, manifest: dict[str, Any], folder: Path) -> None:
    compiled.export_library(folder / LIBRARY)
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))


def build_manifest(compiled: CompiledModel, db: str | Database | None = None,
                   command: list[str] | None = None, db_name: str | None = None) -> dict[str, Any]:
    """What the artifact says of itself (the module docstring lists it)."""
    from autosched._tvm import TVM_VERSION
    from autosched.version import __version__

    return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "name": compiled.name,
            "created_at": _iso(datetime.now(UTC).timestamp()), "library": LIBRARY,
            "signature": {"inputs": [_spec(s) for s in compiled.inputs],
                          "outputs": [_spec(s) for s in compiled.outputs]},
            "target": target_summary(compiled.target), "precision": compiled.precision,
            "versions": {"autosched": __version__, "tvm": TVM_VERSION, "python": platform.python_version()},
            "provenance": provenance(compiled, db, command, db_name)}


def _spec(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype}


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def target_summary(tjson: str) -> dict[str, Any]:
    """The target as JSON and as TVM's string, its LLVM CPU (``mcpu``, ``mattr``, ``mtriple``) and the vector
    extensions its code may use (``targets.VECTOR_FEATURES``)."""
    from autosched._tvm import Target
    from autosched.targets import vector_features

    target = Target(json.loads(tjson))
    attrs = json.loads(tjson)
    return {"json": tjson, "string": str(target), "kind": target.kind.name, "mcpu": attrs.get("mcpu"),
            "mattr": list(attrs.get("mattr", [])), "mtriple": attrs.get("mtriple"),
            "num_cores": attrs.get("num-cores"), "features": vector_features(target)}


def provenance(compiled: CompiledModel, db: str | Database | None, command: list[str] | None = None,
               db_name: str | None = None) -> dict[str, Any]:
    """Where each fusion group's schedule came from: tuned / default / transferred / ..., its task key, the
    database's records of that task and the newest one's time (UTC)."""
    groups = []
    for group, source in compiled.sources.items():
        key = compiled.keys.get(group)
        entry: dict[str, Any] = {"group": group, "schedule": source, "task_key": key}
        if isinstance(db, Database) and key:
            records = db.records(key)
            entry["records"] = len(records)
            entry["newest_record_at"] = _iso(max(r.created_at for r in records)) if records else None
        if group in compiled.borrowed:
            entry["tuned_at_threads"] = compiled.borrowed[group]
        if group in compiled.foreign:
            entry["tuned_on"] = compiled.foreign[group]
        groups.append(entry)
    counts: dict[str, int] = {}
    for source in compiled.sources.values():
        counts[source] = counts.get(source, 0) + 1
    if db_name is None and db is not None:
        db_name = display_name(db)
    return {"database": db_name and mask_secrets(db_name), "command": command and mask_argv(command), "counts": counts,
            "groups": groups}


# --- reading ---------------------------------------------------------------------------------------------------
# An artifact is read as untrusted data up to its library, which is code (see RELIABILITY.md, "Hostile or broken
# files"): each file has a size cap, checked before it is read or extracted, and every name it gives stays inside it.
MANIFEST_MAX_BYTES = MiB  # a manifest is a few KiB
LIBRARY_MAX_BYTES = 2 << 30  # one library; the largest models' weights are in it
MAX_DIM = 2**31 - 1  # an input or output dimension


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The artifact's manifest, checked to be one this code reads; a one-line UserInputError otherwise."""
    path = Path(path)
    if not path.exists():
        raise UserInputError(f"{path} does not exist: {BUILD_HINT}")
    what = f"{path}: its {MANIFEST}"
    if path.is_dir():
        if not (path / MANIFEST).is_file():
            raise UserInputError(f"{path} is a folder without {MANIFEST}, not an autosched artifact: {BUILD_HINT}")
        _require_inside(path, MANIFEST)
        text = read_capped(path / MANIFEST, MANIFEST_MAX_BYTES, what, BUILD_HINT)
    else:
        text = _zip_member(path, MANIFEST, MANIFEST_MAX_BYTES)
    manifest = loads_json(text, what, BUILD_HINT)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserInputError(f"{path}: its {MANIFEST} is not an autosched artifact's: {BUILD_HINT}")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise IncompatibleArtefactError(f"{path} is an artifact of schema version "
                                        f"{str(manifest.get('schema_version'))[:40]}; this autosched reads version "
                                        f"{SCHEMA_VERSION}: rebuild it with this autosched (autosched compile MODEL "
                                        "--db DB -o PATH)")
    _check_manifest(manifest, path)
    return manifest


# What each manifest field must be where present (None: may be null); "target" and "versions" must be present.
_MANIFEST_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str, type(None)), "created_at": (str, type(None)), "library": (str,), "signature": (dict,),
    "target": (dict,), "precision": (str, type(None)), "versions": (dict,), "provenance": (dict,)}
_NESTED_FIELDS: dict[tuple[str, str], tuple[type, ...]] = {
    ("target", "json"): (str,), ("target", "kind"): (str, type(None)), ("target", "mcpu"): (str, type(None)),
    ("target", "features"): (list, type(None)), ("versions", "autosched"): (str,), ("versions", "tvm"): (str,),
    ("versions", "python"): (str,), ("provenance", "database"): (str, type(None))}


def _check_manifest(manifest: dict[str, Any], path: Path) -> None:
    """One line naming the first field of ``manifest`` that is missing or of the wrong type, or a library name
    that is not a plain file name inside the artifact."""
    for key in ("target", "versions"):
        if key not in manifest:
            raise UserInputError(f"{path}: its {MANIFEST} has no {key!r} (damaged?): {BUILD_HINT}")
    for key, kinds in _MANIFEST_FIELDS.items():
        if key in manifest and not isinstance(manifest[key], kinds):
            raise UserInputError(f"{path}: its {MANIFEST}'s {key!r} is {_kind(manifest[key])}, not "
                                 f"{_kind_names(kinds)} (damaged?): {BUILD_HINT}")
    for (outer, key), kinds in _NESTED_FIELDS.items():
        table = manifest.get(outer) or {}
        if (key in table or outer == "target" and key == "json") and not isinstance(table.get(key), kinds):
            raise UserInputError(f"{path}: its {MANIFEST}'s {outer}.{key} is {_kind(table.get(key))}, not "
                                 f"{_kind_names(kinds)} (damaged?): {BUILD_HINT}")
    features = manifest["target"].get("features") or []
    if not all(isinstance(f, str) for f in features):
        raise UserInputError(f"{path}: its {MANIFEST}'s target.features holds a non-string (damaged?): {BUILD_HINT}")
    if not plain_name(manifest.get("library", LIBRARY)):
        raise UserInputError(f"{path}: its {MANIFEST} names the library {str(manifest['library'])[:80]!r}, which is "
                             f"not a file name inside the artifact (a folder, '..' or an absolute path): refused; "
                             f"{BUILD_HINT}")


def _kind(value: Any) -> str:
    return "null or missing" if value is None else type(value).__name__


def _kind_names(kinds: tuple[type, ...]) -> str:
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def _require_inside(folder: Path, name: str) -> None:
    """One line where ``folder / name`` is a symlink leading out of the folder artifact ``folder``."""
    if not inside(folder, folder / name):
        raise UserInputError(f"{folder}: its {name} is a link to a file outside the artifact: refused; "
                             f"{BUILD_HINT}")


def _open_zip(path: Path) -> zipfile.ZipFile:
    """The artifact's zip file, refused where a member's name would leave the folder it is extracted to."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as err:  # ValueError: a damaged central directory
        raise UserInputError(f"{path} is not an autosched artifact (not a zip file, or a damaged one): "
                             f"{BUILD_HINT}") from err
    bad = next((n for n in zf.namelist() if not safe_member_name(n)), None)
    if bad is not None:
        zf.close()
        raise UserInputError(f"{path} holds a file named {bad[:80]!r}, outside the artifact's folder (an absolute "
                             f"path or '..'): refused; {BUILD_HINT}")
    return zf


def _zip_member(path: Path, name: str, limit: int) -> bytes:
    """The member ``name`` of the zip artifact ``path``, refused past ``limit`` bytes (its declared size first)."""
    what = f"{path}: its {name}"
    with _open_zip(path) as zf:
        try:
            info = zf.getinfo(name)
        except KeyError as err:
            raise UserInputError(f"{path} is a zip file without {name}, not an autosched artifact: "
                                 f"{BUILD_HINT}") from err
        if info.file_size > limit:
            raise UserInputError(f"{what} is larger than {limit // MiB} MiB (damaged, or not one): {BUILD_HINT}")
        try:
            with zf.open(info) as f:
                return read_capped_stream(f, limit, what, BUILD_HINT)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, zlib.error) as err:
            raise UserInputError(f"{path} is not an autosched artifact (not a zip file, or a damaged one): "
                                 f"{BUILD_HINT}") from err


def check_host(manifest: dict[str, Any], path: str | Path) -> None:
    """A one-line UserInputError unless this host can run the artifact: the TVM release (major.minor) that built
    it, and a machine that runs its target's code (``targets.require_runs_here``: CPU extensions, architecture,
    GPU)."""
    from autosched._tvm import TVM_VERSION, Target
    from autosched.session import same_release
    from autosched.targets import require_runs_here

    built = str(manifest["versions"].get("tvm", "unknown"))[:40]  # checked by read_manifest
    if not same_release(built, TVM_VERSION):
        raise UserInputError(f"{path} was built with TVM {built} and this runtime is TVM {TVM_VERSION}: rebuild it "
                             f"with this one (autosched compile MODEL --db DB -o {path}), or load it where TVM "
                             f"{'.'.join(built.split('.')[:2])} is installed")
    what = f"{path}: its manifest's target"
    try:
        target = Target(loads_json(manifest["target"]["json"], what, BUILD_HINT))
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise UserInputError(f"{path}: its manifest's target does not parse with TVM {TVM_VERSION}: "
                             f"{BUILD_HINT}") from err
    require_runs_here(target, str(path))


def load_artifact(path: str | Path) -> CompiledModel:
    """The model of an artifact written by ``save_artifact``, after ``check_host``: call it with numpy arrays."""
    path = Path(path)
    manifest = read_manifest(path)
    check_host(manifest, path)
    library = manifest.get("library", LIBRARY)  # a plain file name (_check_manifest)
    if path.is_dir():
        for name in (library, library + ".json"):
            _require_inside(path, name)
        return _load_library(path, path / library)
    folder = tempfile.mkdtemp(prefix="autosched-artifact-")
    try:
        _extract_library(path, library, Path(folder))
        model = _load_library(path, Path(folder) / library)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(model, shutil.rmtree, folder, True)  # the library stays mapped after its file is gone
    return model


def _extract_library(path: Path, library: str, folder: Path) -> None:
    """The library's files (``library``, ``library.json``) of the zip artifact ``path`` into ``folder``, each
    refused where its declared size, or what it holds, passes its cap: nothing else is extracted."""
    caps = {library: LIBRARY_MAX_BYTES, library + ".json": META_MAX_BYTES}
    with _open_zip(path) as zf:
        for info in zf.infolist():
            limit = caps.get(info.filename)
            if limit is None:
                continue
            what = f"{path}: its {info.filename}"
            if info.file_size > limit:
                raise UserInputError(f"{what} is larger than {limit // MiB} MiB (damaged, or not one): {BUILD_HINT}")
            try:
                with zf.open(info) as src, open(folder / info.filename, "wb") as dst:
                    copy_capped(src, dst, limit, what, BUILD_HINT)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, zlib.error) as err:
                raise UserInputError(f"{path}: its files cannot be extracted ({type(err).__name__}: "
                                     f"{str(err)[:120]}): {BUILD_HINT}") from err


def _load_library(path: Path, library: Path) -> CompiledModel:
    """The artifact's library with its metadata (``library.json``, checked first); one line where either is
    missing, malformed or does not load (damaged)."""
    from autosched.deploy.build import load_library

    meta_path = Path(str(library) + ".json")
    if not meta_path.is_file() or not library.is_file():
        raise UserInputError(f"{path}: its library ({library.name}, with {meta_path.name}) is missing: {BUILD_HINT}")
    what = f"{path}: its {meta_path.name}"
    meta = read_json(meta_path, META_MAX_BYTES, what, BUILD_HINT)
    check_library_meta(meta, what)
    try:
        return load_library(library, meta)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as err:  # TVM's errors: RuntimeError
        first = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
        raise UserInputError(f"{path}: its library does not load ({first}): {BUILD_HINT}") from err


def check_library_meta(meta: Any, what: str, fix: str = BUILD_HINT) -> None:
    """One line unless ``meta`` is a single build's metadata: a target string and inputs (outputs) of a name, a
    shape of dimensions in [0, MAX_DIM] and a dtype numpy knows, and tables where tables go."""
    import numpy as np

    if not isinstance(meta, dict) or "buckets" in meta or not isinstance(meta.get("target"), str):
        raise UserInputError(f"{what} is not one build's metadata (damaged?): {fix}")
    for key in ("inputs", "outputs"):
        specs = meta.get(key, [])
        for spec in specs if isinstance(specs, list) else [None]:
            ok = isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[2], str)
            ok = ok and isinstance(spec[1], list) and all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in spec[1])
            try:
                ok = ok and np.dtype(spec[2]).kind in "biufc"
            except (TypeError, ValueError, SyntaxError):
                ok = False
            if not ok:
                raise UserInputError(f"{what}: an entry of its {key} is not [name, shape, dtype] with dimensions in "
                                     f"[0, {MAX_DIM}] (damaged?): {fix}")
    for key, kind in (("entry", str), ("name", str), ("precision", str), ("precision_error", float | int | None)):
        if key in meta and (not isinstance(meta[key], kind) or isinstance(meta[key], bool)):
            raise UserInputError(f"{what}: its {key!r} is {type(meta[key]).__name__} (damaged?): {fix}")
    for key, kind in (("sources", str), ("borrowed", int), ("foreign", str), ("keys", str)):  # group -> value
        table = meta.get(key, {})
        if not isinstance(table, dict) or not all(isinstance(v, kind) and not isinstance(v, bool)
                                                  for v in table.values()):
            raise UserInputError(f"{what}: its {key!r} is not a table of fusion groups to {kind.__name__}s "
                                 f"(damaged?): {fix}")


# --- a bare library (autosched compile -o PATH.so): its PATH.json, read as an artifact's metadata ----------------
LIBRARY_HINT = "build it again with autosched compile MODEL --db DB -o PATH.so"


def read_library_meta(meta_path: Path) -> dict[str, Any]:
    """A library's ``PATH.json``, read as untrusted data: at most ``META_MAX_BYTES`` (as inside an artifact), JSON
    of bounded depth, an object; anything else is one line naming the file."""
    what = f"{meta_path} (the library's metadata)"
    meta = read_json(meta_path, META_MAX_BYTES, what, LIBRARY_HINT)
    if not isinstance(meta, dict):
        raise UserInputError(f"{what} is not a JSON object (damaged?): {LIBRARY_HINT}")
    return meta
