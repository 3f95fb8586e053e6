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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autosched.db import Database, display_name
from autosched.deploy.build import CompiledModel
from autosched.errors import IncompatibleArtefactError, UserInputError
from autosched.masking import mask_argv, mask_secrets

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
    with tempfile.TemporaryDirectory(prefix="autosched-artifact-") as tmp:
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
def read_manifest(path: str | Path) -> dict[str, Any]:
    """The artifact's manifest, checked to be one this code reads; a one-line UserInputError otherwise."""
    path = Path(path)
    if not path.exists():
        raise UserInputError(f"{path} does not exist: {BUILD_HINT}")
    if path.is_dir():
        if not (path / MANIFEST).is_file():
            raise UserInputError(f"{path} is a folder without {MANIFEST}, not an autosched artifact: {BUILD_HINT}")
        text = (path / MANIFEST).read_bytes()
    else:
        text = _zip_member(path, MANIFEST)
    try:
        manifest = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: its {MANIFEST} is not JSON (damaged?): {BUILD_HINT}") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserInputError(f"{path}: its {MANIFEST} is not an autosched artifact's: {BUILD_HINT}")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise IncompatibleArtefactError(f"{path} is an artifact of schema version {manifest.get('schema_version')}; "
                                        f"this autosched reads version {SCHEMA_VERSION}: rebuild it with this "
                                        "autosched (autosched compile MODEL --db DB -o PATH)")
    return manifest


def _zip_member(path: Path, name: str) -> bytes:
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.read(name)
    except zipfile.BadZipFile as err:
        raise UserInputError(f"{path} is not an autosched artifact (not a zip file, or a damaged one): "
                             f"{BUILD_HINT}") from err
    except KeyError as err:
        raise UserInputError(f"{path} is a zip file without {name}, not an autosched artifact: {BUILD_HINT}") from err


def check_host(manifest: dict[str, Any], path: str | Path) -> None:
    """A one-line UserInputError unless this host can run the artifact: the TVM release (major.minor) that built
    it, and a machine that runs its target's code (``targets.require_runs_here``: CPU extensions, architecture,
    GPU)."""
    from autosched._tvm import TVM_VERSION, Target
    from autosched.session import same_release
    from autosched.targets import require_runs_here

    built = str(manifest.get("versions", {}).get("tvm", "unknown"))
    if not same_release(built, TVM_VERSION):
        raise UserInputError(f"{path} was built with TVM {built} and this runtime is TVM {TVM_VERSION}: rebuild it "
                             f"with this one (autosched compile MODEL --db DB -o {path}), or load it where TVM "
                             f"{'.'.join(built.split('.')[:2])} is installed")
    try:
        target = Target(json.loads(manifest["target"]["json"]))
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise UserInputError(f"{path}: its manifest's target does not parse with TVM {TVM_VERSION}: "
                             f"{BUILD_HINT}") from err
    require_runs_here(target, str(path))


def load_artifact(path: str | Path) -> CompiledModel:
    """The model of an artifact written by ``save_artifact``, after ``check_host``: call it with numpy arrays."""
    path = Path(path)
    manifest = read_manifest(path)
    check_host(manifest, path)
    library = str(manifest.get("library", LIBRARY))
    if path.is_dir():
        return _load_library(path, path / library)
    folder = tempfile.mkdtemp(prefix="autosched-artifact-")
    try:
        try:
            with zipfile.ZipFile(path) as zf:
                for name in zf.namelist():
                    if Path(name).name == name and name.startswith(library):  # the library's files, nothing else
                        zf.extract(name, folder)
        except (zipfile.BadZipFile, OSError) as err:
            raise UserInputError(f"{path}: its files cannot be extracted ({err}): {BUILD_HINT}") from err
        model = _load_library(path, Path(folder) / library)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(model, shutil.rmtree, folder, True)  # the library stays mapped after its file is gone
    return model


def _load_library(path: Path, library: Path) -> CompiledModel:
    """``load_compiled`` of the artifact's library; one line where it is missing or does not load (damaged)."""
    from autosched.deploy.library import load_compiled

    try:
        return load_compiled(library)
    except (zipfile.BadZipFile, OSError, RuntimeError, ValueError, KeyError) as err:  # TVM's errors: RuntimeError
        first = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
        raise UserInputError(f"{path}: its library does not load ({first}): {BUILD_HINT}") from err
