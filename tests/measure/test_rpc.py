"""RPC runner: tuning through a TVM RPC tracker and two servers on 127.0.0.1, a server lost mid-run, bad flags."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosched._tvm import IRModule, save_json, te, tirx
from autosched.cli import main
from autosched.config import TuneConfig
from autosched.db import MemoryDatabase, open_database
from autosched.measure.rpc import n_devices, tracker_summary
from autosched.records import Candidate, Status
from autosched.session import TuningSession
from autosched.testing.fakes import ListStrategy
from autosched.testing.rpc import LoopbackCluster, free_port
from autosched.tune import tune_task

KEY = "autosched-test"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LoopbackCluster(2, tmp_path_factory.mktemp("rpc"), KEY)
    yield c
    c.stop()


def _tune_args(db: Path, *extra: str) -> list[str]:
    return ["tune", "--op", "matmul", "--shape", "32,32,32", "--trials", "6", "--batch", "3", "--threads", "1",
            "--cost-model", "none", "--seed", "0", "--no-baseline", "--quiet", "--db", str(db), *extra]


def _statuses(db: Path) -> Counter:
    database = open_database(str(db))
    try:
        return Counter(r.status for r in database.records())
    finally:
        database.close()


@pytest.mark.long
@pytest.mark.slow
def test_rpc_tuning_records_as_many_valid_trials_as_local(cluster, tmp_path, capsys):
    assert main(_tune_args(tmp_path / "local.db")) == 0
    assert main(_tune_args(tmp_path / "rpc.db", "--rpc", cluster.address, "--key", KEY)) == 0
    local, remote = _statuses(tmp_path / "local.db"), _statuses(tmp_path / "rpc.db")
    assert remote[Status.OK] == local[Status.OK] >= 5, (local, remote)
    assert sum(remote.values()) == sum(local.values())
    # TuningRecord has no field for where a candidate ran (and the schema stays as it is): nothing to check there.
    assert n_devices("127.0.0.1", cluster.port, KEY) == 2  # both servers are still serving


@pytest.mark.long
@pytest.mark.slow
def test_reference_outputs_are_computed_on_a_remote_device(cluster, matmul_task):
    """Tasks without a NumPy reference (a model's) take the unscheduled build's outputs on the device."""
    cfg = TuneConfig(n_threads=1, build_timeout_s=60, rpc=cluster.address, rpc_key=KEY)
    with TuningSession(cfg, matmul_task.target_json) as session:
        io = session.prepare_io(matmul_task)  # inputs, and NumPy's outputs to compare with
        (got,) = session.runner.reference_outputs(session._unscheduled_library(matmul_task), io)
        with np.load(io.io_path) as data:
            np.testing.assert_allclose(got, data["out0"], rtol=1e-4, atol=1e-4)


def _matmul_plus(n: int, extra=None) -> IRModule:
    """The matmul task's signature, with ``extra`` (an expression) added to the output element (0, 0)."""
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    if extra is None:
        return IRModule({"main": te.create_prim_func([a, b, c])})
    d = te.compute((n, n), lambda i, j: c[i, j] + te.if_then_else(tirx.all(i == 0, j == 0), extra, 0.0), name="D")
    return IRModule({"main": te.create_prim_func([a, b, d])})


def _extern(name: str, *args: Any) -> Any:  # abort, sleep and usleep return 0 (if they return)
    return tirx.Cast("float32", tirx.call_extern("int32", name, *args))


@pytest.mark.long
@pytest.mark.slow
def test_bad_candidates_cost_one_trial_each_on_remote_devices(matmul_task, tmp_path):
    """As with the local runner: a crash, a hang and a wrong result are each one trial; the good ones go on.
    (TVM's rpc_server stops serving after a session process crashes: the crash takes its server away.)"""
    cluster = LoopbackCluster(2, tmp_path, KEY)
    try:
        mods = {"good": _matmul_plus(32), "crash": _matmul_plus(32, _extern("abort")),
                "hang": _matmul_plus(32, _extern("sleep", 1000)),
                "wrong": _matmul_plus(32, tirx.const(1.0, "float32"))}
        order = ["good", "hang", "wrong", "good", "crash", "good", "good"]
        cands = [Candidate(matmul_task.key, {"kind": k}, decisions=[i], mod_json=save_json(mods[k]))
                 for i, k in enumerate(order)]
        cfg = TuneConfig(n_threads=1, run_timeout_s=4, build_timeout_s=60, repeat=1, min_repeat_ms=1,
                         rpc=cluster.address, rpc_key=KEY)
        db = MemoryDatabase()
        with TuningSession(cfg, matmul_task.target_json) as session:
            result = tune_task(matmul_task, ListStrategy(cands), session.builder, session.runner, db,
                               session.prepare_io(matmul_task), n_trials=len(cands), batch_size=4)
        records = db.records()
        assert [r.status for r in records] == [Status.OK, Status.TIMEOUT, Status.WRONG_RESULT, Status.OK,
                                               Status.RUN_ERROR, Status.OK, Status.OK], [(r.status, r.error)
                                                                                         for r in records]
        assert "timed out" in records[1].error and "differs" in records[2].error
        assert result.n_new == len(order) and result.best.params == {"kind": "good"}
        assert n_devices("127.0.0.1", cluster.port, KEY) == 1  # the crashed server left the tracker
    finally:
        cluster.stop()


@pytest.mark.long
@pytest.mark.slow
def test_a_server_killed_mid_run_costs_at_most_its_candidate(matmul_task, tmp_path):
    cluster = LoopbackCluster(2, tmp_path, KEY)
    try:
        mod_json = save_json(_matmul_plus(32, _extern("usleep", 300_000)))
        cands = [Candidate(matmul_task.key, {"i": i}, decisions=[i], mod_json=mod_json) for i in range(8)]
        cfg = TuneConfig(n_threads=1, run_timeout_s=20, build_timeout_s=60, repeat=1, min_repeat_ms=1,
                         rpc=cluster.address, rpc_key=KEY)
        killed_at: list[float] = []

        def kill_when_busy() -> None:  # server 0 dies while both devices hold a session (one is its candidate)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and tracker_summary("127.0.0.1", cluster.port)["queue_info"][KEY]["free"]:
                time.sleep(0.02)
            cluster.kill(cluster.servers[0])
            killed_at.append(time.monotonic())

        def kill_soon(progress) -> None:  # from the second batch on
            if killer.ident is None:
                killer.start()

        killer = threading.Thread(target=kill_when_busy)
        db = MemoryDatabase()
        with TuningSession(cfg, matmul_task.target_json) as session:
            strategy = ListStrategy(cands)
            result = tune_task(matmul_task, strategy, session.builder, session.runner, db,
                               session.prepare_io(matmul_task), n_trials=len(cands), batch_size=4,
                               on_progress=kill_soon)
        ended = time.monotonic()
        statuses = Counter(r.status for r in db.records())
        killer.join()
        assert killed_at and killed_at[0] < ended  # the kill happened during the run
        assert result.n_new == 8 and sum(statuses.values()) == 8
        assert statuses[Status.OK] >= 7 and set(statuses) <= {Status.OK, Status.RUN_ERROR}, statuses
        assert n_devices("127.0.0.1", cluster.port, KEY) == 1
    finally:
        cluster.stop()


# --- one-line errors, before the database is written --------------------------------------------------------
def _refused(args: list[str], db: Path, capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not db.exists()
    return err


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:", ":9190", "127.0.0.1:99999"])
def test_malformed_tracker_address(address, tmp_path, capsys):
    db = tmp_path / "t.db"
    err = _refused(_tune_args(db, "--rpc", address, "--key", KEY), db, capsys)
    assert "HOST:PORT" in err


def test_unreachable_tracker(tmp_path, capsys):
    db = tmp_path / "t.db"
    err = _refused(_tune_args(db, "--rpc", f"127.0.0.1:{free_port()}", "--key", KEY), db, capsys)
    assert "no TVM RPC tracker answers there" in err and "rpc_tracker" in err


def test_rpc_and_key_go_together(tmp_path, capsys):
    db = tmp_path / "t.db"
    assert "go together" in _refused(_tune_args(db, "--rpc", "127.0.0.1:9190"), db, capsys)
    assert "go together" in _refused(_tune_args(db, "--key", KEY), db, capsys)


@pytest.mark.long
@pytest.mark.slow
def test_no_device_under_the_key(cluster, tmp_path, capsys):
    db = tmp_path / "t.db"
    err = _refused(_tune_args(db, "--rpc", cluster.address, "--key", "no-such-key"), db, capsys)
    assert "no device registered under this key" in err and KEY in err  # and names the keys that are there


@pytest.mark.long
@pytest.mark.slow
def test_model_tuning_refuses_a_bad_key_before_the_database(cluster, tmp_path, capsys):
    db = tmp_path / "t.db"
    args = ["tune", "zoo:mlp", "--trials", "1", "--db", str(db), "--rpc", cluster.address, "--key", "nope"]
    assert "no device registered" in _refused(args, db, capsys)
