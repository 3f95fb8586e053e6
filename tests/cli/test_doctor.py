"""``autosched doctor``: a real run on this machine; what it says must hold on any x86-64 host (the CPU changes
between machines: assert against autosched's own detection, never a fixed CPU)."""

from __future__ import annotations

import json
import platform

import pytest

from autosched._tvm import TVM_VERSION, host_cpu
from autosched.cli import main
from autosched.config import resolve_threads
from autosched.db import TaskRow, open_database
from autosched.records import Status, TuningRecord
from autosched.targets import host_target, make_target, target_json

x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86-64 host")


@pytest.fixture(scope="module")
def report():
    """``autosched doctor --json`` once for the module (it reads every shipped log: a few seconds)."""
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["doctor", "--json"]) == 0
    return json.loads(buffer.getvalue())


def test_the_target_and_threads_are_what_autosched_detects(report):
    assert report["target"]["json"] == target_json(host_target())
    assert f"-mcpu={host_cpu()}" in report["target"]["llvm"] and report["threads"] == resolve_threads()
    assert report["cpu"]["llvm_cpu"] == host_cpu() and report["cpu"]["vector_bits"] in (128, 256, 512)


@x86_only
def test_the_cpu_flags_agree_with_the_vector_width(report):
    flags = report["cpu"]["flags"]
    assert {"AVX2", "AVX-512F", "AMX", "AVX-512 VNNI", "AVX-512 BF16"} <= set(flags)
    assert report["cpu"]["vector_bits"] == (512 if flags["AVX-512F"] else 256 if flags["AVX2"] else 128)
    assert report["cpu"]["vendor"] and report["cpu"]["model"]


def test_versions_and_every_shipped_log_are_reported(report):
    from autosched.doctor import shipped_logs

    versions = report["versions"]
    assert versions["TVM"] == TVM_VERSION and versions["Python"] == platform.python_version()
    assert {"torch", "onnxruntime", "optuna", "xgboost"} <= set(versions)
    assert all(v for v in versions.values())  # a version, or "not installed"
    assert [log["name"] for log in report["shipped_logs"]] == [p.name for p in shipped_logs()]
    for log in report["shipped_logs"]:
        assert log["n_records"] == sum(log["reasons"].values()) > 0
        assert set(log["kinds"].values()) <= {"applies", "timed here", "does not apply"}


def test_the_tables_name_the_target_and_the_logs(capsys, monkeypatch):
    from autosched import doctor

    monkeypatch.setattr(doctor, "shipped_logs", _first_log)  # one log is enough for the table's shape
    assert main(["doctor"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"-mcpu={host_cpu()}" in out and TVM_VERSION in out and "which records apply here" in out
    assert "shipped logs have records for this machine" in out


def _first_log():
    from autosched.paths import data_dir

    return sorted(data_dir("tuning_logs").glob("example_mlp*"))


def _record(target: str, tvm_version: str = TVM_VERSION) -> TuningRecord:
    return TuningRecord("k" + str(abs(hash((target, tvm_version))))[:19], target, {}, [], None, Status.OK, [1e-3],
                        None, "0.1.0", tvm_version, 2)


@x86_only
def test_a_database_with_a_foreign_record_says_why_it_does_not_apply(tmp_path, capsys, monkeypatch):
    """One record for this CPU's target, one for the x86-64-v3 baseline (another CPU's schedule: rebuilt and timed
    here), one for an aarch64 CPU (never on this x86-64 host), one measured with an old TVM."""
    from autosched import doctor

    monkeypatch.setattr(doctor, "shipped_logs", lambda: [])
    here, arm = target_json(host_target()), target_json(make_target("aarch64:neoverse-v1", 4))
    baseline = target_json(make_target('{"kind": "llvm", "mcpu": "x86-64-v3", "num-cores": 2}'))
    db_path = tmp_path / "mixed.db"
    with open_database(str(db_path)) as db:
        for record in (_record(here), _record(baseline), _record(arm), _record(here, "0.18.0")):
            db.commit_task(TaskRow(record.task_key, "t", record.target, 2, "", 1.0, {}))
            db.commit([record])
    assert main(["doctor", "--db", str(db_path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["database"]
    assert found["n_records"] == 4 and found["applying"] == 1 and found["usable"] == 2
    reasons = found["reasons"]
    assert any(why.startswith("x86-64-v3, 2 thread(s): another CPU's") and found["kinds"][why] == "timed here"
               for why in reasons)
    assert any("neoverse-v1, 4 thread(s): this machine is not aarch64" in why for why in reasons)
    assert any("measured with TVM 0.18" in why for why in reasons)
    assert any("this CPU's target" in why and found["kinds"][why] == "applies" for why in reasons)
    assert main(["doctor", "--db", str(db_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 of 4 records apply here, 1 more are timed here" in out and "measured with TVM 0.18" in out
