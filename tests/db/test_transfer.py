"""JSON-lines export and import: every line checked before anything is written, one transaction, a trailer that
refuses a file cut short or edited; older exports (no trailer) still read; an export never leaves half a file."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from autosched.db import SQLDatabase, TaskRow, transfer
from autosched.db import sql as sql_module
from autosched.db.transfer import export_jsonl, import_jsonl, read_jsonl
from autosched.errors import UserInputError
from autosched.records import Status, TuningRecord

SHIPPED = Path(__file__).resolve().parents[2] / "tuning_logs" / "example_mlp.jsonl.gz"


def _task(key):
    return TaskRow(key, f"task_{key}", '{"kind": "llvm"}', 1, "{}", 1e6, {"op": "matmul"})


def _rec(key, lat, status=Status.OK):
    return TuningRecord(key, '{"kind": "llvm"}', {"a": 1}, [[1, 2], lat], None, status,
                        [lat] * 3 if status is Status.OK else [], None if status is Status.OK else "err",
                        "0.1.0", "0.27", 1)


@pytest.fixture()
def source(tmp_path):
    db = SQLDatabase(str(tmp_path / "source.db"))
    for key in ("k1", "k2"):
        db.commit_task(_task(key))
    db.commit([_rec("k1", 1e-3), _rec("k1", 2e-3, Status.RUN_ERROR), _rec("k2", 3e-3)])
    yield db
    db.close()


def _lines(path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return f.read().splitlines()


def _rewrite(path, lines):
    """``lines`` (the header and body) with a fresh, matching trailer: what an export of them would be."""
    body = "".join(line + "\n" for line in lines)
    trailer = {"trailer": {"lines": len(lines), "sha256": hashlib.sha256(body.encode()).hexdigest()}}
    path.write_text(body + json.dumps(trailer) + "\n")


def _counts(db):
    return len(db.tasks()), len(db.records())


def test_an_export_ends_in_a_trailer_counting_and_hashing_its_lines(source, tmp_path):
    path = tmp_path / "x.jsonl"
    assert export_jsonl(source, path) == (2, 3)
    *body, last = _lines(path)
    assert json.loads(body[0])["export_version"] == 2
    trailer = json.loads(last)["trailer"]
    assert trailer["lines"] == len(body) == 1 + 2 + 3
    assert trailer["sha256"] == hashlib.sha256("".join(line + "\n" for line in body).encode()).hexdigest()
    tasks, records, _ = read_jsonl(path)
    assert len(tasks) == 2 and len(records) == 3


BAD_RECORDS = [
    ("status", None, "'status'"),
    ("status", "FAST", "'status'"),
    ("latencies_s", [-1.0], "'latencies_s'"),
    ("latencies_s", [0.0], "'latencies_s'"),
    ("latencies_s", [float("nan")], "'latencies_s'"),
    ("latencies_s", [float("inf")], "'latencies_s'"),
    ("latencies_s", "0.001", "'latencies_s'"),
    ("params", [1, 2], "'params'"),
    ("task_key", None, "'task_key'"),
    ("target", "{not json", "'target'"),
    ("space_version", "1", "'space_version'"),
    ("created_at", None, "'created_at'"),
    ("surprise", 1, "unknown record field 'surprise'"),
]


@pytest.mark.parametrize("field,value,message", BAD_RECORDS)
def test_a_bad_record_is_refused_naming_its_line_and_field(source, tmp_path, field, value, message):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    lines = _lines(path)[:-1]
    item = json.loads(lines[3])  # header, 2 tasks, then the records: line 4 is the first (an OK one)
    item["record"][field] = value
    lines[3] = json.dumps(item)
    _rewrite(path, lines)
    with pytest.raises(UserInputError, match="line 4") as err:
        read_jsonl(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_required_record_field_is_named(source, tmp_path):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    lines = _lines(path)[:-1]
    item = json.loads(lines[3])
    del item["record"]["decisions"]
    lines[3] = json.dumps(item)
    _rewrite(path, lines)
    with pytest.raises(UserInputError, match=r"line 4: record field 'decisions' is missing"):
        read_jsonl(path)


@pytest.mark.parametrize("field,value", [("workload_json", "not json"), ("flops", -1), ("info", None),
                                         ("space_version", 1.5)])
def test_a_bad_task_is_refused_naming_its_line_and_field(source, tmp_path, field, value):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    lines = _lines(path)[:-1]
    item = json.loads(lines[1])
    item["task"][field] = value
    lines[1] = json.dumps(item)
    _rewrite(path, lines)
    with pytest.raises(UserInputError, match=f"line 2: task field '{field}'"):
        read_jsonl(path)


@pytest.mark.parametrize("header", ["[]", "null", "42", '"autosched-export"', ""])
def test_a_header_that_is_not_an_object_is_refused(tmp_path, header):
    path = tmp_path / "x.jsonl"
    path.write_text(header + "\n")
    with pytest.raises(UserInputError, match="not an autosched export.*line 1"):
        read_jsonl(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_file_cut_in_the_middle_is_refused(source, tmp_path, suffix):
    path = tmp_path / f"x{suffix}"
    export_jsonl(source, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserInputError, match="cut short|cannot read|line"):
        read_jsonl(path)


@pytest.mark.parametrize("cut", ["whole trailer", "half the trailer", "trailer and a record"])
def test_a_file_cut_at_its_end_is_refused(source, tmp_path, cut):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    lines = _lines(path)
    kept = {"whole trailer": lines[:-1], "half the trailer": [*lines[:-1], lines[-1][: len(lines[-1]) // 2]],
            "trailer and a record": lines[:-2]}[cut]
    path.write_text("".join(line + "\n" for line in kept))
    with pytest.raises(UserInputError, match="cut short"):
        read_jsonl(path)


@pytest.mark.parametrize("edit", ["a changed record", "a dropped record"])
def test_a_file_that_does_not_match_its_trailer_is_refused(source, tmp_path, edit):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    lines = _lines(path)
    if edit == "a changed record":
        lines[3] = lines[3].replace("0.001", "0.0001")
    else:
        del lines[3]
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(UserInputError, match="does not match its trailer"):
        read_jsonl(path)


def test_a_shipped_export_without_a_trailer_still_imports(tmp_path):
    assert "trailer" not in _lines(SHIPPED)[-1]  # written by an earlier autosched (export version 1)
    tasks, records, _ = read_jsonl(SHIPPED)
    assert (len(tasks), len(records)) == (6, 497)
    with SQLDatabase(str(tmp_path / "copy.db")) as db:
        assert import_jsonl(db, tasks, records) == (6, 497)


def test_an_import_that_fails_midway_writes_nothing(source, tmp_path, monkeypatch):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    target = SQLDatabase(str(tmp_path / "target.db"))
    target.commit_task(_task("k0"))
    target.commit([_rec("k0", 5e-3)])

    def fail(records):
        raise OSError("the disk went away")

    monkeypatch.setattr(sql_module, "_record_rows", fail)  # after the tasks were inserted, before the records
    with pytest.raises(OSError):
        import_jsonl(target, *read_jsonl(path))
    monkeypatch.undo()
    assert _counts(target) == (1, 1)
    assert import_jsonl(target, *read_jsonl(path)) == (2, 3) and _counts(target) == (3, 4)


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_an_interrupted_export_keeps_the_old_file_and_leaves_no_temporary_one(source, tmp_path, monkeypatch, suffix):
    path = tmp_path / f"x{suffix}"
    path.write_bytes(b"the previous export")

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transfer.os, "fsync", no_space)
    with pytest.raises(UserInputError, match="cannot write .*No space left"):
        export_jsonl(source, path)
    assert path.read_bytes() == b"the previous export"
    assert [p.name for p in tmp_path.iterdir() if p.name != "source.db"] == [path.name]


def test_an_export_interrupted_by_ctrl_c_midway_keeps_the_old_file(source, tmp_path, monkeypatch):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b"the previous export")
    writes = []

    def write(self, data):
        writes.append(data)
        if len(writes) == 3:
            raise KeyboardInterrupt
        return real_write(self, data)

    real_write = gzip.GzipFile.write
    monkeypatch.setattr(gzip.GzipFile, "write", write)
    with pytest.raises(KeyboardInterrupt):
        export_jsonl(source, path)
    assert path.read_bytes() == b"the previous export"
    assert sorted(os.listdir(tmp_path)) == ["source.db", "x.jsonl.gz"]


def test_an_export_has_the_usual_file_permissions(source, tmp_path):
    path = tmp_path / "x.jsonl"
    export_jsonl(source, path)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def _gzip_bomb(path, n_mib):
    """A valid header, then ``n_mib`` MiB of 1 KiB lines of spaces: a few KiB compressed."""
    header = json.dumps({"format": transfer.FORMAT, "schema_version": 2, "export_version": 2}) + "\n"
    line = (" " * 1023 + "\n").encode()
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(header.encode())
        for _ in range(n_mib):
            f.write(line * 1024)
    return path


def test_a_gzip_export_is_read_only_up_to_its_decompressed_cap(tmp_path, monkeypatch, capsys):
    import tracemalloc

    from autosched import bounded
    from autosched.cli import main

    bomb = _gzip_bomb(tmp_path / "bomb.jsonl.gz", 64)
    assert bomb.stat().st_size < 1 << 20  # 64 MiB decompressed from well under 1 MiB
    monkeypatch.setattr(bounded, "EXPORT_MAX_BYTES", 4 << 20, raising=False)  # the real cap: 4 GiB; same check
    tracemalloc.start()
    try:
        with pytest.raises(UserInputError) as caught:
            read_jsonl(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and str(bomb) in message and "more than 4 MiB" in message
    assert "autosched export" in message
    assert peak < 16 << 20, peak  # stopped at the cap: read whole, the lines took 64 MiB and more
    assert main(["import", str(bomb), "--db", str(tmp_path / "new.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "more than 4 MiB" in err
    assert not (tmp_path / "new.db").exists()  # refused before the database is opened


def test_the_real_cap_is_4_gib_and_an_export_under_it_reads(source, tmp_path):
    from autosched import bounded

    assert bounded.EXPORT_MAX_BYTES == 4 << 30
    path = tmp_path / "x.jsonl.gz"
    export_jsonl(source, path)
    assert len(read_jsonl(path)[1]) == 3


@pytest.mark.parametrize("damage", ["flipped bytes", "not gzip", "bad crc"])
def test_a_gzip_export_whose_gzip_is_corrupt_is_one_line_exit_2(source, tmp_path, capsys, damage):
    from autosched.cli import main

    path = tmp_path / "x.jsonl.gz"
    export_jsonl(source, path)
    data = bytearray(path.read_bytes())
    if damage == "flipped bytes":  # inside the deflate stream
        for i in range(20, len(data) - 8, 7):
            data[i] ^= 0xFF
    elif damage == "not gzip":
        data[:2] = b"PK"
    else:  # the CRC32 in the gzip trailer
        data[-8] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(UserInputError, match="cannot read .*x.jsonl.gz|line|not an autosched export|cut short"):
        read_jsonl(path)
    assert main(["import", str(path), "--db", str(tmp_path / "new.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "x.jsonl.gz" in err and "internal error" not in err
