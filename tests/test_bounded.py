"""Bounded reads of untrusted files: byte, line and nesting caps, and names that stay inside a folder."""

from __future__ import annotations

import io

import pytest

from autosched.bounded import (
    check_depth,
    copy_capped,
    decode,
    inside,
    loads_json,
    plain_name,
    read_capped,
    read_lines,
    safe_member_name,
)
from autosched.errors import UserInputError


def test_read_capped_refuses_a_file_past_its_cap_and_reads_one_at_it(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_capped(path, 10, "f", "fix") == b"x" * 10
    with pytest.raises(UserInputError, match="f is larger than 9 bytes .*: fix"):
        read_capped(path, 9, "f", "fix")


def test_read_lines_refuses_a_long_line_before_reading_the_rest():
    assert list(read_lines(io.StringIO("ab\ncd\r\n\nlast"), 4, "f", "fix")) == ["ab", "cd", "", "last"]
    assert list(read_lines(io.StringIO("abcd\n"), 4, "f", "fix")) == ["abcd"]  # at the cap: kept
    with pytest.raises(UserInputError, match="has a line longer than 4 bytes"):
        list(read_lines(io.StringIO("ok\nabcde\n"), 4, "f", "fix"))


def test_copy_capped_stops_a_stream_longer_than_it_says():
    out = io.BytesIO()
    copy_capped(io.BytesIO(b"x" * 100), out, 100, "m", "fix")
    assert out.getvalue() == b"x" * 100
    with pytest.raises(UserInputError, match="m is larger than 99 bytes"):
        copy_capped(io.BytesIO(b"x" * 100), io.BytesIO(), 99, "m", "fix")


def test_json_nesting_is_capped_and_measured_without_recursion():
    assert loads_json("[[1]]", "j", "fix", max_depth=2) == [[1]]
    for text in ("[[[1]]]", "[" * 200_000 + "]" * 200_000):
        with pytest.raises(UserInputError, match="nests deeper than 2 levels"):
            loads_json(text, "j", "fix", max_depth=2)
    deep: list = []
    for _ in range(100_000):  # deeper than the interpreter's stack allows a recursive walk
        deep = [deep]
    with pytest.raises(UserInputError, match="nests deeper than 64"):
        check_depth(deep, "j", "fix")
    with pytest.raises(UserInputError, match="is not JSON"):
        loads_json(b"\xff\xfe", "j", "fix")
    with pytest.raises(UserInputError, match="is not UTF-8 text"):
        decode(b"\xff", "j", "fix")


@pytest.mark.parametrize("name,ok", [("model.so", True), ("model.so.json", True), ("..", False), (".", False),
                                     ("", False), ("../x.so", False), ("/abs.so", False), ("a/b.so", False),
                                     ("a\\b.so", False), ("c:x.so", False), ("x\x00.so", False), (5, False)])
def test_plain_name(name, ok):
    assert plain_name(name) is ok


@pytest.mark.parametrize("name,ok", [("manifest.json", True), ("dir/file", True), ("../x", False), ("/x", False),
                                     ("a/../../x", False), ("a\\..\\x", False), ("c:x", False), ("", False)])
def test_safe_member_name(name, ok):
    assert safe_member_name(name) is ok


def test_inside_follows_symlinks(tmp_path):
    folder, outside = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    outside.write_text("x")
    (folder / "link").symlink_to(outside)
    (folder / "file").write_text("x")
    assert inside(folder, folder / "file") and not inside(folder, folder / "link")


def test_capped_reader_passes_up_to_its_limit_and_refuses_past_it():
    from autosched.bounded import CappedReader

    def read(data: bytes, limit: int) -> str:
        with io.TextIOWrapper(io.BufferedReader(CappedReader(io.BytesIO(data), limit, "x.jsonl.gz", "fix"))) as f:
            return f.read()

    assert read(b"a\n" * 50, 100) == "a\n" * 50  # exactly the limit
    with pytest.raises(UserInputError, match=r"^x.jsonl.gz holds more than 100 bytes \(decompressed; .*\): fix$"):
        read(b"a\n" * 51, 100)
