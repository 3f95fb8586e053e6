"""A bare library's ``PATH.json`` (``autosched compile -o model.so``) is read as untrusted data, with the cap an
artifact's ``model.so.json`` has (``bounded.META_MAX_BYTES``): too large, not JSON, too deep or not a build's
metadata is one ``UserInputError`` line naming the file, read before anything is loaded."""

from __future__ import annotations

import os

import pytest

import autosched
from autosched.bounded import META_MAX_BYTES
from autosched.deploy import artifact
from autosched.deploy.library import load_compiled
from autosched.errors import UserInputError


def _library(tmp_path, meta: bytes | None = None, size: int | None = None):
    """``model.so`` (empty: never reached) with ``model.so.json`` holding ``meta`` or ``size`` sparse zero bytes."""
    lib = tmp_path / "model.so"
    lib.write_bytes(b"")
    meta_path = tmp_path / "model.so.json"
    if size is not None:
        with open(meta_path, "wb") as f:
            f.truncate(size)  # sparse: nothing is written, so the test stays fast
    else:
        meta_path.write_bytes(meta or b"")
    return lib, meta_path


def _refusal(lib) -> str:
    with pytest.raises(UserInputError) as caught:
        load_compiled(lib)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "model.so.json" in message and "autosched compile" in message
    return message


def test_one_cap_for_a_librarys_metadata_in_an_artifact_and_beside_a_bare_library():
    assert artifact.META_MAX_BYTES is META_MAX_BYTES == 16 << 20


def test_an_oversized_metadata_file_is_refused_after_reading_at_most_the_cap(tmp_path):
    import tracemalloc

    lib, meta_path = _library(tmp_path, size=4 * META_MAX_BYTES)
    assert os.stat(meta_path).st_blocks * 512 < 1 << 20  # sparse
    tracemalloc.start()
    try:
        assert "larger than 16 MiB" in _refusal(lib)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * META_MAX_BYTES, peak  # the cap and a byte, not the whole file


@pytest.mark.parametrize(
    "meta,problem",
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe binary", "not JSON"),
        (b"[" * 200 + b"]" * 200, "nests deeper"),
        (b"[]", "not a JSON object"),
        (b'{"target": "llvm", "inputs": [["x", [-1], "float32"]]}', "inputs"),
        (b'{"inputs": []}', "not one build's metadata"),
    ],
)
def test_malformed_metadata_is_one_line_naming_the_file(tmp_path, meta, problem):
    lib, _ = _library(tmp_path, meta)
    assert problem in _refusal(lib)


def test_autosched_load_of_a_bare_library_refuses_the_same_way(tmp_path):
    lib, _ = _library(tmp_path, size=META_MAX_BYTES + 1)
    with pytest.raises(UserInputError, match="larger than 16 MiB"):
        autosched.load(str(lib))
