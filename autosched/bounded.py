"""Bounded reads of files autosched did not write itself (configs, artifacts, exports, target JSON): each read has a
byte cap, each JSON value a nesting cap, and each path inside an artifact stays inside it. Every refusal is one
``UserInputError`` line naming the file, the problem and the fix.

These limits stop a damaged or hostile file from exhausting memory or the stack; they do not make its *contents*
safe: an artifact's library is machine code that runs when loaded (see RELIABILITY.md, "Hostile or broken files").
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from autosched.errors import UserInputError

MiB = 1 << 20
GiB = 1 << 30
MAX_DEPTH = 64  # nesting of any JSON value read from a file (autosched writes at most 5 levels)
EXPORT_MAX_BYTES = 4 * GiB  # an export's text, decompressed: the shipped logs are a few MiB; more is a gzip bomb
META_MAX_BYTES = 16 * MiB  # a library's metadata (PATH.json, in an artifact or beside a bare .so): a few KiB per group


def read_capped(path: str | Path, limit: int, what: str, fix: str) -> bytes:
    """The bytes of ``path``, refused (before reading more than ``limit`` + 1 bytes) where it holds more."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UserInputError(f"{what} is larger than {_size(limit)} (damaged, or not one): {fix}")
    return data


def read_capped_stream(f: IO[bytes], limit: int, what: str, fix: str) -> bytes:
    """Like ``read_capped``, from an open binary stream (a zip member)."""
    data = f.read(limit + 1)
    if len(data) > limit:
        raise UserInputError(f"{what} is larger than {_size(limit)} (damaged, or not one): {fix}")
    return data


def decode(data: bytes, what: str, fix: str) -> str:
    """``data`` as UTF-8 text; a binary file is one line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserInputError(f"{what} is not UTF-8 text (a binary file? byte {err.start}): {fix}") from err


def loads_json(text: str | bytes, what: str, fix: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` of untrusted text: malformed, binary or nested deeper than ``max_depth`` is one line."""
    try:
        value = json.loads(text)
    except RecursionError as err:
        raise UserInputError(f"{what} nests deeper than {max_depth} levels (damaged, or not one): {fix}") from err
    except (ValueError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UserInputError(f"{what} is not JSON (damaged?): {fix}") from err
    check_depth(value, what, fix, max_depth)
    return value


def read_json(path: str | Path, limit: int, what: str, fix: str, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in file ``path``, read at most ``limit`` bytes of it (``read_capped`` then ``loads_json``)."""
    return loads_json(read_capped(path, limit, what, fix), what, fix, max_depth)


def check_depth(value: Any, what: str, fix: str, max_depth: int = MAX_DEPTH) -> None:
    """One line where ``value`` (parsed JSON or TOML) nests lists and dicts deeper than ``max_depth``."""
    stack = [(value, 1)]
    while stack:  # iterative: a deep value must not exhaust the stack that measures it
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise UserInputError(f"{what} nests deeper than {max_depth} levels (damaged, or not one): {fix}")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))


def read_lines(f: IO[str], limit: int, what: str, fix: str) -> Iterator[str]:
    """The lines of text stream ``f`` (without their ends), one at a time, each refused past ``limit`` characters
    before more of it is read."""
    while line := f.readline(limit + 1):
        if len(line.removesuffix("\n")) > limit:
            raise UserInputError(f"{what} has a line longer than {_size(limit)} (damaged, or not one): {fix}")
        yield line.removesuffix("\n").removesuffix("\r")


class CappedReader(io.RawIOBase):
    """A binary stream (a ``GzipFile``: its decompressed bytes) that refuses, in one line, once more than ``limit``
    bytes came from it; wrap it in ``io.TextIOWrapper`` to read text."""

    def __init__(self, raw: IO[bytes], limit: int, what: str, fix: str):
        super().__init__()
        self._raw, self._limit, self._what, self._fix, self.n_read = raw, limit, what, fix, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)
        self.n_read += n
        if self.n_read > self._limit:
            raise UserInputError(f"{self._what} holds more than {_size(self._limit)} (decompressed; damaged, or not "
                                 f"one): {self._fix}")
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def copy_capped(src: IO[bytes], dst: IO[bytes], limit: int, what: str, fix: str) -> None:
    """Copy ``src`` to ``dst``, refused once more than ``limit`` bytes came (a zip member larger than it says)."""
    copied = 0
    while chunk := src.read(min(MiB, limit + 1 - copied)):
        copied += len(chunk)
        if copied > limit:
            raise UserInputError(f"{what} is larger than {_size(limit)} (damaged, or not one): {fix}")
        dst.write(chunk)


def plain_name(name: object) -> bool:
    """Whether ``name`` is a plain file name: a non-empty string without a folder, ``..``, a drive or a NUL, so
    that joined to a folder it names a file in that folder."""
    if not isinstance(name, str) or not name or name in (".", "..") or "\x00" in name:
        return False
    return "/" not in name and "\\" not in name and ":" not in name and PurePosixPath(name).name == name


def safe_member_name(name: str) -> bool:
    """Whether a zip member's name stays inside the folder it is extracted to: relative, no ``..``, no drive,
    no backslash, no NUL."""
    if not name or "\x00" in name or "\\" in name or ":" in name or name.startswith("/"):
        return False
    return ".." not in PurePosixPath(name).parts


def inside(folder: Path, path: Path) -> bool:
    """Whether ``path``, its symlinks resolved, lies inside ``folder`` (resolved too)."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
    except (OSError, ValueError):
        return False


def _size(n: int) -> str:
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB} GiB"
    return f"{n // MiB} MiB" if n >= MiB else f"{n} bytes"


__all__ = ["EXPORT_MAX_BYTES", "MAX_DEPTH", "META_MAX_BYTES", "CappedReader", "GiB", "MiB", "check_depth",
           "copy_capped", "decode", "inside", "loads_json", "plain_name", "read_capped", "read_capped_stream",
           "read_json", "read_lines", "safe_member_name"]
