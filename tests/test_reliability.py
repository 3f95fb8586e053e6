"""Reliability: each fault of RELIABILITY.md injected for real, and what is left afterwards.

Faults in candidates go through the real worker processes; interruptions (kill -9, Ctrl-C) and concurrent tuners
run the real command line in subprocesses; broken databases are hashed before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosched._tvm import save_json
from autosched.cli import main
from autosched.config import TuneConfig
from autosched.db import SQLDatabase, open_database
from autosched.records import Candidate, Status
from autosched.search.study import load_task_study
from autosched.session import TuningSession
from autosched.tasks import make_target, op_task
from autosched.testing.fakes import ListStrategy
from autosched.testing.faults import FaultyBuilder, fault_module, faulty_matmul
from autosched.tune import tune_task

ROOT = Path(__file__).resolve().parents[1]
N = 16  # matmul 16x16x16: every candidate builds and runs in well under a second


@pytest.fixture(scope="module")
def task16():
    from autosched.spaces.settings import settings_for

    target = make_target("llvm", 1)
    return op_task("matmul", (N, N, N), target, settings_for(target).version)


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _cands(task, kinds: list[str | None], build_faults: dict[int, str] | None = None) -> list[Candidate]:
    build_faults = build_faults or {}
    return [Candidate(task.key, {"fault": str(kind)}, decisions=[i],
                      mod_json=fault_module(build_faults[i]) if i in build_faults
                      else save_json(faulty_matmul(N, kind)))
            for i, kind in enumerate(kinds)]


# --- 1. faults in candidates ----------------------------------------------------------------------------------
@pytest.mark.long
@pytest.mark.slow
def test_candidates_that_segfault_get_oom_killed_or_exhaust_memory_cost_one_trial_each(task16, tmp_path):
    """Run faults: SIGSEGV, SIGKILL (the OOM killer), a 4 EiB allocation, a wrong result. (abort, hang and an
    unbuildable module: tests/measure/test_local.py::test_bad_candidates_cost_one_trial_each_and_the_run_finishes)"""
    kinds = [None, "segfault", "oom_kill", "alloc", "wrong", None]
    db = SQLDatabase(str(tmp_path / "f.db"))
    cfg = TuneConfig(n_threads=1, run_timeout_s=20, build_timeout_s=60, repeat=1, min_repeat_ms=1)
    with TuningSession(cfg, task16.target_json) as session:
        strategy = ListStrategy(_cands(task16, kinds))
        db.commit_task(_task_row(task16))
        result = tune_task(task16, strategy, session.builder, session.runner, db, session.prepare_io(task16),
                           n_trials=len(kinds), batch_size=3)
    recs = db.records(task16.key)
    assert [r.status for r in recs] == [Status.OK, Status.RUN_ERROR, Status.RUN_ERROR, Status.RUN_ERROR,
                                        Status.WRONG_RESULT, Status.OK]
    assert all(r.error for r in recs[1:5]) and "bad_alloc" in recs[3].error and "differs" in recs[4].error
    assert result.n_new == len(kinds) and len(strategy.told) == len(kinds)
    assert result.best is not None and result.best.status is Status.OK


@pytest.mark.long
@pytest.mark.slow
def test_compiles_that_raise_crash_kill_or_hang_the_build_worker_cost_one_trial_each(task16, tmp_path):
    kinds = [None, None, None, None, None, None]
    faults = {1: "raise", 2: "kill", 3: "segfault", 4: "hang"}
    db = SQLDatabase(str(tmp_path / "b.db"))
    cfg = TuneConfig(n_threads=1, run_timeout_s=20, repeat=1, min_repeat_ms=1)
    with TuningSession(cfg, task16.target_json, builder=FaultyBuilder(task16.target_json, 2, timeout_s=8)) as session:
        strategy = ListStrategy(_cands(task16, kinds, faults))
        db.commit_task(_task_row(task16))
        result = tune_task(task16, strategy, session.builder, session.runner, db, session.prepare_io(task16),
                           n_trials=len(kinds), batch_size=6)
    recs = db.records(task16.key)
    assert [r.status for r in recs] == [Status.OK, Status.BUILD_ERROR, Status.BUILD_ERROR, Status.BUILD_ERROR,
                                        Status.TIMEOUT, Status.OK]
    assert "injected compiler failure" in recs[1].error and "timed out" in recs[4].error
    assert result.n_new == len(kinds) and result.best.status is Status.OK


def _task_row(task):
    from autosched.db import TaskRow

    return TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod), task.flops,
                   task.info)


# --- 2./3. kill -9 and Ctrl-C of the real command line ---------------------------------------------------------
def _tune_argv(db: Path, n_trials: int, seed: int = 0) -> list[str]:
    return [sys.executable, "-X", "faulthandler", "-m", "autosched.cli", "--log", str(db.with_suffix(".log")), "tune",
            "--op", "matmul",
            "--shape", f"{N},{N},{N}", "--threads", "1", "--batch", "1", "--cost-model", "none", "--no-baseline",
            "--trials", str(n_trials), "--seed", str(seed), "--db", str(db)]


def _start(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # its own process group: the test can clean up its workers
                            preexec_fn=_default_sigint)


def _default_sigint() -> None:
    """A test run in the background (``pytest &``) ignores SIGINT, and so would the tuner, as it inherits it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _n_records(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("select count(*) from autosched_records").fetchone()[0]
    except sqlite3.Error:  # not created yet, or locked for a moment
        return 0


def _wait_for_records(proc: subprocess.Popen, db: Path, n: int, timeout_s: float = 120) -> None:
    end = time.monotonic() + timeout_s
    while _n_records(db) < n:
        assert proc.poll() is None, f"the tuner ended early: {proc.communicate()}"
        assert time.monotonic() < end, "no records in time"
        time.sleep(0.1)


def _reap_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # orphaned build/run workers, if any
    except ProcessLookupError:
        pass


def _group_alive_after(pgid: int, timeout_s: float) -> bool:
    """Whether any process of the group is still alive after ``timeout_s`` (the workers of a killed tuner)."""
    import psutil

    def alive() -> bool:
        for p in psutil.process_iter(["status"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    return True
            except (ProcessLookupError, psutil.Error):
                pass
        return False

    end = time.monotonic() + timeout_s
    while alive():
        if time.monotonic() > end:
            return True
        time.sleep(0.2)
    return False


def _check_consistent(db_path: Path, measured_not_told: int = 0) -> tuple[list, object]:
    """The file passes SQLite's integrity check, every record is a distinct schedule, and every record is one
    finished Optuna trial (less ``measured_not_told`` trials: committed, then killed before Optuna heard)."""
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    db = open_database(str(db_path), create=False)
    (task,) = db.tasks()
    recs = db.records(task.task_key)
    keys = [json.dumps(r.decisions, sort_keys=True) for r in recs]
    assert len(keys) == len(set(keys)), "a schedule was recorded twice"
    study = load_task_study(db.optuna_storage(), task.task_key)
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()
                and t.state.name in ("COMPLETE", "PRUNED") and not t.user_attrs.get("duplicate")]
    assert len(recs) - measured_not_told <= len(finished) <= len(recs)
    db.close()
    return recs, study


@pytest.mark.long
@pytest.mark.slow
def test_kill_9_mid_run_leaves_a_clean_database_and_the_same_command_resumes(tmp_path):
    db = tmp_path / "k.db"
    proc = _start(_tune_argv(db, 5))
    try:
        _wait_for_records(proc, db, 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        orphans_left = _group_alive_after(proc.pid, 15)
    finally:
        _reap_group(proc)
    assert proc.returncode == -signal.SIGKILL
    assert not orphans_left, "build/run workers outlived the killed tuner"
    before, _ = _check_consistent(db, measured_not_told=1)
    n_before = len(before)
    assert 2 <= n_before < 5
    resumed = subprocess.run(_tune_argv(db, 5), cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming matmul_{N}x{N}x{N}: {n_before} of 5" in resumed.stderr
    assert f"this run: {5 - n_before} new measurements" in resumed.stdout  # finished work is not redone
    after, study = _check_consistent(db, measured_not_told=1)
    assert len(after) == 5 and [r.record_id for r in after[:n_before]] == [r.record_id for r in before]
    assert not [t for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 0.7], ids=["just-after-a-commit", "mid-measurement"])
def test_ctrl_c_stops_within_seconds_saves_what_was_measured_and_exits_130(tmp_path, delay_s):
    db = tmp_path / "c.db"
    proc = _start(_tune_argv(db, 50))
    try:
        _wait_for_records(proc, db, 1)
        time.sleep(delay_s)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # -X faulthandler: every thread's stack on stderr
            stdout, stderr = proc.communicate(timeout=30)
        stopped_s = time.monotonic() - sent
    finally:
        _reap_group(proc)
    log = db.with_suffix(".log")  # the library's log holds fd 2 too: faulthandler's stacks of a hang land there
    logged = log.read_text()[-20000:] if log.exists() else ""
    assert proc.returncode == 130 and stopped_s < 10, stderr + stdout + logged
    last = stderr.strip().splitlines()[-1]
    assert last == "autosched: interrupted; every fully measured candidate is in the database"
    assert "Traceback" not in stderr
    recs, study = _check_consistent(db)
    assert 1 <= len(recs) < 50
    assert all(r.status is Status.OK for r in recs), [r.error for r in recs]  # Ctrl-C is no candidate's failure
    # at most the trial being asked for when Ctrl-C came is left RUNNING (unmeasured; failed on the next run)
    assert len([t for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]) <= 1


# --- 4. concurrent tuners on one database -----------------------------------------------------------------------
_WORKER = """
import json, sys
from autosched.config import TuneConfig
from autosched.db import open_database
from autosched.session import TuningSession
from autosched.spaces.settings import settings_for
from autosched.tasks import make_target, op_task
from autosched.testing.fakes import NullBuilder, NullRunner

url, seed, n_trials = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
target = make_target("llvm", 1)
task = op_task("matmul", (16, 16, 16), target, settings_for(target).version)
db = open_database(url)
cfg = TuneConfig(n_threads=1, cost_model="none", seed=seed, batch_size=2)
with TuningSession(cfg, task.target_json, builder=NullBuilder(), runner=NullRunner()) as session:
    result = session.tune(task, db, n_trials=n_trials)
print(json.dumps({"n_new": result.n_new, "n_measured": result.n_measured}))
"""


def _run_concurrently(url: str, n_workers: int, n_trials: int, same_seed: bool = False) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, url, str(0 if same_seed else i), str(n_trials)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n_workers)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def _check_shared(url: str, reports: list[dict], n_trials: int, batch: int = 2) -> None:
    db = open_database(url, create=False)
    (task,) = db.tasks()
    recs = db.records(task.task_key)
    assert sum(r["n_new"] for r in reports) == len(recs)  # nothing lost
    # the budget is the database's, shared by the workers (each may have one batch in flight when it is reached)
    assert n_trials <= len(recs) < n_trials + len(reports) * batch
    keys = [json.dumps(r.decisions, sort_keys=True) for r in recs]
    study = load_task_study(db.optuna_storage(), task.task_key)
    trials = study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state.name == "RUNNING"]
    measured = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED") and not t.user_attrs.get("duplicate")]
    assert len(measured) == len(recs)
    db.close()
    # a tuner works on a task only while it holds the task's claim: two never ask at once, so no schedule twice
    assert len(keys) == len(set(keys)), "a schedule was measured twice"


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("n_workers", [2, 4])
def test_concurrent_tuners_on_one_sqlite_database(tmp_path, n_workers):
    url = str(tmp_path / "shared.db")  # not there yet: the workers race to create it
    reports = _run_concurrently(url, n_workers, 16)
    _check_shared(url, reports, 16)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("n_workers", [2, 4])
def test_concurrent_tuners_on_one_postgresql_database(n_workers, postgres_url):
    """Needs AUTOSCHED_TEST_POSTGRES_URL (a server this test may create and drop a database on)."""
    open_database(postgres_url).close()
    reports = _run_concurrently(postgres_url, n_workers, 16)
    _check_shared(postgres_url, reports, 16)


# --- 5. broken, foreign and incompatible database files ----------------------------------------------------------
@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory) -> Path:
    """A real SQLite tuning database with a task, records and an Optuna study (fake measurements: fast)."""
    from autosched.spaces.settings import settings_for
    from autosched.testing.fakes import NullBuilder, NullRunner

    path = tmp_path_factory.mktemp("tuned") / "tuned.db"
    target = make_target("llvm", 1)
    task = op_task("matmul", (N, N, N), target, settings_for(target).version)
    db = open_database(str(path))
    cfg = TuneConfig(n_threads=1, cost_model="none", batch_size=4)
    with TuningSession(cfg, task.target_json, builder=NullBuilder(), runner=NullRunner()) as session:
        session.tune(task, db, n_trials=8)
    db.close()
    return path


def _truncated(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 3])
    return dst


def _scribbled(src: Path, dst: Path) -> Path:
    data = bytearray(src.read_bytes())
    page = 4096
    for p in range(1, len(data) // page):  # every page but the first (the header) overwritten with noise
        data[p * page: p * page + 512] = bytes((i * 37 + p) % 251 for i in range(512))
    dst.write_bytes(bytes(data))
    return dst


def _scribbled_tail(src: Path, dst: Path) -> Path:
    data = bytearray(src.read_bytes())  # the schema and meta pages intact, the last (record) pages noise
    for p in range(len(data) // 4096 - 2, len(data) // 4096):
        data[p * 4096: (p + 1) * 4096] = bytes((i * 53 + p) % 249 for i in range(4096))
    dst.write_bytes(bytes(data))
    return dst


def _newer_schema(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    with sqlite3.connect(dst) as conn:
        conn.execute("update autosched_meta set value='3' where key='schema_version'")
    conn.close()
    return dst


def _not_a_database(src: Path, dst: Path) -> Path:
    dst.write_bytes(b"\x08\x01\x12\x04onnx" + bytes(range(256)) * 8)
    return dst


def _empty_sqlite_with_other_tables(src: Path, dst: Path) -> Path:
    with sqlite3.connect(dst) as conn:
        conn.execute("create table invoices (id integer primary key, total real)")
    conn.close()
    return dst


BROKEN = {"truncated": _truncated, "corrupted-pages": _scribbled, "corrupted-tail": _scribbled_tail,
          "newer-schema": _newer_schema,
          "not-a-database": _not_a_database, "foreign-sqlite": _empty_sqlite_with_other_tables}
COMMANDS = {
    "show": [], "export": ["-o", "{tmp}/out.jsonl"], "report": ["-o", "{tmp}/r.json"],
    "tune": ["--op", "matmul", "--shape", f"{N},{N},{N}", "--trials", "9", "--cost-model", "none",
             "--threads", "1", "--no-baseline"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("fault", list(BROKEN))
def test_a_broken_database_is_one_line_exit_2_and_left_byte_identical(tuned_db, tmp_path, capsys, fault, command):
    path = BROKEN[fault](tuned_db, tmp_path / "broken.db")
    before = _digest(path)
    extra = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[command]]
    code = main(["--log", str(tmp_path / "log"), command, "--db", str(path), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("autosched: error:") and len(err.splitlines()) == 1, err
    assert _digest(path) == before
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "r.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("broken")) == ["broken.db"]


# --- 6. a disk that fills up, a database that turns read-only ----------------------------------------------------
_DISK_FILLS_UP = """
import sqlite3, sys
import sqlalchemy as sa
n_records, limit = [0], int(sys.argv[1])

@sa.event.listens_for(sa.engine.Engine, "before_cursor_execute")
def _disk_full(conn, cursor, statement, parameters, context, executemany):
    verb = statement.lstrip().upper()
    n_records[0] += verb.startswith("INSERT INTO AUTOSCHED_RECORDS")
    if n_records[0] > limit and verb.startswith(("INSERT", "UPDATE", "DELETE")):
        raise sqlite3.OperationalError("database or disk is full")  # what SQLite says on ENOSPC

from autosched.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("sqlite_says,we_say", [("database or disk is full", "disk is full"),
                                                ("attempt to write a readonly database", "read-only")],
                         ids=["disk-full", "read-only"])
def test_a_database_that_fails_mid_run_is_one_line_and_nothing_is_lost_or_corrupted(tmp_path, sqlite_says, we_say):
    """SQLite's own error, raised on every write after the second batch (simulated: no root needed)."""
    db = tmp_path / "full.db"
    argv = _tune_argv(db, 4)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = _DISK_FILLS_UP.replace("database or disk is full", sqlite_says)
    proc = subprocess.run([sys.executable, "-c", script, "2", *argv[5:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[-1].startswith("autosched: error:") and we_say in lines[-1], lines[-1]
    recs, _ = _check_consistent(db, measured_not_told=1)
    assert len(recs) == 2  # the two batches saved before the failure; the third is not half-written
    resumed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fixed
    assert resumed.returncode == 0 and "resuming" in resumed.stderr, resumed.stderr
    after, _ = _check_consistent(db, measured_not_told=1)
    assert len(after) == 4


@pytest.fixture()
def small_tmpfs(tmp_path):
    mount = tmp_path / "mnt"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("needs root to mount a tmpfs (a file system that can be remounted read-only mid-run)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.long
@pytest.mark.slow
def test_a_real_full_disk_mid_run_is_one_line_and_nothing_is_corrupted(small_tmpfs):
    """A real ENOSPC: the tmpfs holding the database is shrunk to what it holds after the first record."""
    db = small_tmpfs / "full.db"
    argv = _tune_argv(db, 200)
    argv[argv.index("--log") + 1] = str(small_tmpfs.parent / "full.log")
    proc = _start(argv)
    try:
        _wait_for_records(proc, db, 1)
        for _ in range(20):  # a tmpfs refuses to shrink below what it holds: the tuner may write in between
            st = os.statvfs(small_tmpfs)
            used_kb = (st.f_blocks - st.f_bfree) * st.f_frsize // 1024
            if subprocess.run(["mount", "-o", f"remount,size={used_kb + 8}k", str(small_tmpfs)],
                              capture_output=True).returncode == 0:
                break
        else:
            pytest.fail("could not shrink the tmpfs to what it holds")
        _, stderr = proc.communicate(timeout=240)
    finally:
        _reap_group(proc)
    lines = stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in stderr, stderr
    assert lines[-1].startswith("autosched: error:") and "full" in lines[-1], lines[-1]
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_tmpfs)], check=True)
    recs, _ = _check_consistent(db, measured_not_told=1)
    assert 1 <= len(recs) < 200


def _forge(db_path: Path, dst: Path, **changes: str) -> Path:
    """A copy of ``db_path`` whose records all carry other values (another TVM version, another target)."""
    dst.write_bytes(db_path.read_bytes())
    with sqlite3.connect(dst) as conn:
        for column, value in changes.items():
            conn.execute(f"update autosched_records set {column} = ?", (value,))
    conn.close()
    return dst


def test_records_of_another_tvm_release_are_refused_in_one_line_and_left_alone(tuned_db, tmp_path, capsys):
    path = _forge(tuned_db, tmp_path / "old_tvm.db", tvm_version="0.19.0")
    before = _digest(path)
    argv = ["--log", str(tmp_path / "log"), "tune", "--op", "matmul", "--shape", f"{N},{N},{N}", "--trials", "9",
            "--cost-model", "none", "--threads", "1", "--no-baseline", "--db", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "measured 8 with TVM 0.19.0" in err and "new --db" in err, err
    assert _digest(path) == before
    assert main(["--log", str(tmp_path / "log"), "show", "--db", str(path)]) == 0  # still readable: shown as is
    assert _digest(path) == before


def test_records_of_another_target_are_never_applied_to_this_one(tuned_db, tmp_path):
    """A task key includes the target, and ``best`` matches the exact target JSON: a faster record forged for
    another CPU under this task's key is never this target's best."""
    from autosched.records import TuningRecord

    path = tmp_path / "other_target.db"
    path.write_bytes(tuned_db.read_bytes())
    db = open_database(str(path))
    (task,) = db.tasks()
    mine = db.best(task.task_key, task.target)
    other = json.dumps({**json.loads(task.target), "mcpu": "some-other-cpu"})
    fake = db.records(task.task_key)[-1]
    db.commit([TuningRecord(task.task_key, other, fake.params, ["forged"], fake.trace_json, Status.OK, [1e-12] * 3,
                            None, fake.autosched_version, fake.tvm_version, fake.space_version)])
    assert db.best(task.task_key, task.target).record_id == mine.record_id
    assert db.best(task.task_key, other).latency_s == 1e-12
    db.close()


# --- 5. no orphans: workers and scratch folders of a tuner killed or stopped --------------------------------------
_HANGING = """
import os, sys, threading, time
from autosched.cli import _stop_on_sigterm_as_on_ctrl_c
from autosched.measure.local import LocalBuilder, isolated
from autosched.records import Candidate
from autosched.scratch import ScratchDir

def hang(marker, *args):  # a build or a candidate that never ends, once it has said it began
    open(marker, "w").close()
    time.sleep(3600)

class HangingBuilder(LocalBuilder):
    build_fn = staticmethod(lambda mod_json, target_json, path: hang(mod_json))

_stop_on_sigterm_as_on_ctrl_c()  # as the command line does
scratch = ScratchDir("orphan-test")
open(os.path.join(scratch.name, "io-weights.npz"), "wb").write(b"x" * 1000)
builder = HangingBuilder('{"kind": "llvm"}', n_workers=1, timeout_s=3600)
try:
    with isolated(3600, 1) as call:
        build_marker = os.path.join(sys.argv[1], "building")
        threading.Thread(target=builder.build, args=([Candidate("t", {}, mod_json=build_marker)],),
                         daemon=True).start()
        print(scratch.name, builder.work_dir, flush=True)
        call(hang, os.path.join(sys.argv[1], "running"))
finally:
    builder.close()
    scratch.cleanup()
"""


def _session_processes(sid: int) -> list:
    import psutil

    found = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getsid(p.pid) == sid and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, PermissionError):
            pass
    return found


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_tuner_killed_inside_a_hanging_candidate_and_a_long_build_leaves_no_process_or_scratch_file(sig, tmp_path):
    """The signal goes to the tuner alone (not its group, as a terminal's Ctrl-C would): its workers die with it
    (the kernel's parent-death signal), and its scratch folders (built libraries, io-*.npz with the model's
    weights) are removed by its reaper (SIGKILL) or by itself (SIGTERM, handled as Ctrl-C), within 10 s."""
    proc = _start([sys.executable, "-c", _HANGING, str(tmp_path)])
    try:
        folders = proc.stdout.readline().split()
        assert len(folders) == 2 and all(os.path.isdir(f) for f in folders), proc.stderr.read()
        deadline = time.monotonic() + 60
        while not all((tmp_path / m).exists() for m in ("building", "running")) and time.monotonic() < deadline:
            time.sleep(0.2)  # both workers inside their job (idle ones would see their pipe close and exit)
        workers = [p for p in _session_processes(proc.pid) if p.pid != proc.pid]
        assert len(workers) == 2, "the build and run workers are not both inside their job"
        os.kill(proc.pid, sig)
        proc.wait(30)
        end = time.monotonic() + 10
        while (_session_processes(proc.pid) or any(os.path.exists(f) for f in folders)) and time.monotonic() < end:
            time.sleep(0.2)
        left = [p.pid for p in _session_processes(proc.pid)]
        files_left = [f for f in folders if os.path.exists(f)]
    finally:
        _reap_group(proc)
    assert proc.returncode == -(sig if sig == signal.SIGKILL else signal.SIGINT)  # SIGTERM: as Ctrl-C (uncaught)
    assert not left, f"processes {left} outlived the tuner by 10 s"
    assert not files_left, f"scratch {files_left} outlived the tuner by 10 s"


@pytest.mark.long
@pytest.mark.slow
def test_sigterm_stops_the_command_line_as_ctrl_c_does_and_exits_143(tmp_path):
    db = tmp_path / "t.db"
    proc = _start(_tune_argv(db, 50))
    try:
        _wait_for_records(proc, db, 1)
        os.kill(proc.pid, signal.SIGTERM)  # the tuner alone: timeout, systemd, Kubernetes
        stdout, stderr = proc.communicate(timeout=30)
        orphans_left = _group_alive_after(proc.pid, 10)
    finally:
        _reap_group(proc)
    assert proc.returncode == 143, stderr + stdout
    assert stderr.strip().splitlines()[-1] == ("autosched: stopped (SIGTERM); every fully measured candidate is in "
                                               "the database")
    assert "Traceback" not in stderr and not orphans_left
    recs, study = _check_consistent(db)
    assert 1 <= len(recs) < 50 and all(r.status is Status.OK for r in recs)
    assert len([t for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]) <= 1
