"""Load a model library written by ``autosched compile -o`` (one build, or one per shape bucket)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autosched.deploy.buckets import load_buckets_library
from autosched.deploy.build import load_library
from autosched.errors import UserInputError


def load_compiled(path: str | Path) -> Any:
    """A ``CompiledModel`` written by ``CompiledModel.export_library``, or a ``BucketedModel`` written by
    ``export_buckets`` (``autosched compile --shape-buckets``): its ``PATH.json`` says which."""
    path = Path(path)
    meta_path = Path(str(path) + ".json")
    if not meta_path.exists() or not (path.exists() or "buckets" in json.loads(meta_path.read_text())):
        raise UserInputError(f"{path} (with {meta_path.name} beside it) does not exist: build it with "
                             "autosched compile MODEL --db DB -o PATH")
    meta = json.loads(meta_path.read_text())
    if "buckets" in meta:  # a model with symbolic dimensions: one library per bucket
        return load_buckets_library(path, meta)
    return load_library(path, meta)
