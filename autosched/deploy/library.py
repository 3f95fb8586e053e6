"""Load a model library written by ``autosched compile -o`` (one build, or one per shape bucket)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosched.deploy.artifact import LIBRARY_HINT, check_library_meta, read_library_meta
from autosched.deploy.build import load_library
from autosched.errors import UserInputError


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
        from autosched.deploy.buckets import load_buckets_library  # (which reads each bucket's metadata here)

        return load_buckets_library(path, meta)
    check_library_meta(meta, f"{meta_path} (the library's metadata)", LIBRARY_HINT)
    return load_library(path, meta)
