"""Load a model library written by ``autosched compile -o`` (one build, or one per shape bucket)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosched.bounded import META_MAX_BYTES, read_json
from autosched.deploy.artifact import check_library_meta
from autosched.deploy.buckets import load_buckets_library
from autosched.deploy.build import load_library
from autosched.errors import UserInputError

LIBRARY_HINT = "build it again with autosched compile MODEL --db DB -o PATH.so"


def read_library_meta(meta_path: Path) -> dict[str, Any]:
    """A library's ``PATH.json``, read as untrusted data: at most ``META_MAX_BYTES`` (as inside an artifact), JSON
    of bounded depth, an object; anything else is one line naming the file."""
    what = f"{meta_path} (the library's metadata)"
    meta = read_json(meta_path, META_MAX_BYTES, what, LIBRARY_HINT)
    if not isinstance(meta, dict):
        raise UserInputError(f"{what} is not a JSON object (damaged?): {LIBRARY_HINT}")
    return meta


def load_compiled(path: str | Path) -> Any:
    """A ``CompiledModel`` written by ``CompiledModel.export_library``, or a ``BucketedModel`` written by
    ``export_buckets`` (``autosched compile --shape-buckets``): its ``PATH.json`` says which."""
    path = Path(path)
    meta_path = Path(str(path) + ".json")
    meta = read_library_meta(meta_path) if meta_path.is_file() else None
    if meta is None or not (path.exists() or "buckets" in meta):
        raise UserInputError(f"{path} (with {meta_path.name} beside it) does not exist: build it with "
                             "autosched compile MODEL --db DB -o PATH")
    if "buckets" in meta:  # a model with symbolic dimensions: one library per bucket
        return load_buckets_library(path, meta)
    check_library_meta(meta, f"{meta_path} (the library's metadata)", LIBRARY_HINT)
    return load_library(path, meta)
