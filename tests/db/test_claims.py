"""Task claims (leases) of workers sharing one database, on every Database implementation: one live claim per
task, taken over once expired, atomic under a race of threads and of processes; and the worker-side holder
(``Leases``): nested holds, heartbeat, waiting for a task another worker holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from autosched.db import Leases, MemoryDatabase, SQLDatabase, open_database
from autosched.db.transfer import export_jsonl

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_V1 = ROOT / "tests" / "fixtures" / "db_v1.db"


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "memory":
        d = MemoryDatabase()
    elif request.param == "sqlite":
        d = SQLDatabase(str(tmp_path / "c.db"))
    else:
        d = SQLDatabase(request.getfixturevalue("postgres_url"))
    yield d
    d.close()


def test_one_live_claim_per_task_renewed_and_released_by_its_holder(db):
    assert db.claim("t1", "a", 60, n_trials=8)
    assert not db.claim("t1", "b", 60)  # a holds it
    assert db.claim("t1", "a", 60, n_trials=4)  # its holder claims it again: a renewal
    assert db.claim("t2", "b", 60)  # another task is free
    assert {(c.task_key, c.worker_id, c.n_trials) for c in db.claims()} == {("t1", "a", 4), ("t2", "b", 0)}
    db.release("t1", "b")  # not b's: nothing happens
    assert not db.claim("t1", "b", 60)
    db.release("t1", "a")
    assert db.claim("t1", "b", 60) and not db.renew("t1", "a") and db.renew("t1", "b")


def test_an_expired_claim_is_taken_over_and_its_dead_holder_cannot_renew_it(db):
    assert db.claim("t", "dead", 0.3)
    assert not db.claim("t", "b", 60)
    time.sleep(0.6)
    assert db.claims() == []  # expired: no longer live
    assert db.claim("t", "b", 60)
    assert not db.renew("t", "dead")  # it comes back too late: b has it
    db.release("t", "dead")  # and its release does not end b's claim
    assert [(c.task_key, c.worker_id) for c in db.claims()] == [("t", "b")]
    assert db.claims()[0].expires_at > time.time() + 50 - 5  # the lease runs from the claim (clocks within 5 s)


def test_two_threads_racing_for_the_same_tasks_never_both_win(db):
    keys, wins = [f"t{i}" for i in range(30)], {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def worker(name: str) -> None:
        for key in keys:
            barrier.wait()  # both claim each key at the same moment
            if db.claim(key, name, 60):
                wins[name].append(key)

    threads = [threading.Thread(target=worker, args=(n,)) for n in wins]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins["a"] + wins["b"]) == sorted(keys)  # each key won exactly once
    assert {c.task_key: c.worker_id for c in db.claims()} == {k: n for n, ks in wins.items() for k in ks}


_RACER = """
import json, pathlib, sys, time
from autosched.db import open_database
url, name, ready, n = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), int(sys.argv[4])
db = open_database(url)
db.claims()  # the table exists before the race
(ready / name).touch()
while len(list(ready.iterdir())) < n:  # all connected: go together
    time.sleep(0.001)
print(json.dumps([k for k in (f"t{i}" for i in range(40)) if db.claim(k, name, 60)]))
"""


def _race_processes(url: str, ready: Path, n: int = 3) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, url, f"w{i}", str(ready), str(n)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return [json.loads(out) for out, _ in outs]


@pytest.mark.long
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_three_processes_racing_for_the_same_tasks_never_both_win(backend, tmp_path, request):
    url = str(tmp_path / "race.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    open_database(url).close()
    won = _race_processes(url, tmp_path / "ready")
    assert sorted(k for w in won for k in w) == sorted(f"t{i}" for i in range(40))
    db = open_database(url)
    assert {c.task_key: c.worker_id for c in db.claims()} == {k: f"w{i}" for i, w in enumerate(won) for k in w}
    db.close()


def test_a_database_of_an_earlier_version_gains_the_claims_table_and_keeps_its_format(tmp_path):
    path = tmp_path / "v1.db"
    shutil.copy(FIXTURE_V1, path)
    db = open_database(str(path))  # migrates v1 -> v2; no claims table yet
    assert "autosched_claims" not in sa.inspect(db.engine).get_table_names()
    assert db.claim("t", "a", 60) and [c.worker_id for c in db.claims()] == ["a"]
    assert "autosched_claims" in sa.inspect(db.engine).get_table_names()
    export_jsonl(db, tmp_path / "x.jsonl")  # claims are not tuning results: never exported
    lines = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert lines[0] == {"format": "autosched-export", "schema_version": 2, "export_version": 2}
    assert {next(iter(item)) for item in lines[1:]} == {"task", "record", "trailer"}
    db.close()
    assert open_database(str(path), create=False).records()  # still readable


# --- the worker side: Leases --------------------------------------------------------------------------------------
def test_holds_nest_and_the_last_release_ends_the_claim():
    db = MemoryDatabase()
    mine, other = Leases(db, "a"), Leases(db, "b")
    assert mine.try_hold("t", n_trials=8) and mine.try_hold("t")  # the model loop, then the round's tune
    assert not other.try_hold("t") and set(other.others()) == {"t"} and other.others()["t"].n_trials == 8
    mine.release("t")
    assert not other.try_hold("t")  # still held by the outer hold
    mine.release("t")
    assert other.try_hold("t") and mine.held() == set() and other.held() == {"t"}


def test_the_heartbeat_keeps_a_claim_alive_past_its_lease():
    db = MemoryDatabase()
    mine, other = Leases(db, "a", lease_s=0.3), Leases(db, "b", lease_s=0.3)
    with mine.holding("t") as got:
        assert got
        time.sleep(1.0)  # three leases long: renewed every 0.1 s
        assert not other.try_hold("t") and not mine.lost
    assert other.try_hold("t")


def test_a_worker_waits_for_a_task_another_holds_and_takes_it_over_when_that_one_dies():
    db = MemoryDatabase()
    assert db.claim("t", "dead", 0.5)  # a worker killed while holding t: nobody renews it
    leases = Leases(db, "a", poll_s=0.05)
    start = time.monotonic()
    assert leases.hold("t")
    assert 0.3 < time.monotonic() - start < 2.0
    leases.close()
    assert db.claims() == []


def test_a_wait_ends_with_the_time_budget():
    db = MemoryDatabase()
    assert db.claim("t", "other", 60)
    end = time.monotonic() + 0.3
    assert not Leases(db, "a", poll_s=0.05).hold("t", lambda: end - time.monotonic())


def test_in_turn_gives_each_task_once_and_the_ones_others_hold_last():
    db = MemoryDatabase()
    assert db.claim("t1", "other", 60)
    leases, order = Leases(db, "a", poll_s=0.05), []
    for key in leases.in_turn(["t1", "t2", "t3"]):
        assert [c.worker_id for c in db.claims() if c.task_key == key] == ["a"]  # held while the caller works
        order.append(key)
        if key == "t3":
            db.release("t1", "other")  # the other worker is done with it
    assert order == ["t2", "t3", "t1"] and db.claims() == []


def test_in_turn_does_not_wait_for_a_task_another_worker_has_already_done():
    """The other worker keeps its task claimed (round after round), but has done what this worker came for."""
    db = MemoryDatabase()
    assert db.claim("t1", "other", 60)
    leases, done = Leases(db, "a", poll_s=0.05), set()
    start = time.monotonic()
    order = []
    for key in leases.in_turn(["t1", "t2"], done=lambda key: key in done):
        order.append(key)
        done.add("t1")  # the other worker stores t1's result while this one works on t2
    assert order == ["t2", "t1"] and time.monotonic() - start < 1.0
    assert [c.worker_id for c in db.claims()] == ["other"]  # never taken from it


def test_the_claim_of_a_killed_worker_of_this_machine_is_taken_over_at_once(tmp_path):
    url = str(tmp_path / "k.db")
    open_database(url).close()
    killed = ("import os; from autosched.db import open_database; db = open_database(os.environ['DB']); "
              "assert db.leases().try_hold('t'); os._exit(0)")  # dies holding it, as after kill -9
    subprocess.run([sys.executable, "-c", killed], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "DB": url},
                   check=True, timeout=60)
    db = open_database(url)
    (claim,) = db.claims()  # its lease still runs for a minute...
    assert not db.claim("t", "other-machine-worker", 60)
    assert db.leases().try_hold("t")  # ...but its process is gone: no need to wait it out
    assert [c.worker_id for c in db.claims()] == [db.leases().worker_id] != [claim.worker_id]
    db.close()


def test_a_claim_of_another_container_with_this_host_name_is_waited_out_not_taken(tmp_path):
    """Two containers with one host name (``--network host``) on one database: the other's PIDs are not visible
    here, so its claim is judged by its lease, never taken as a dead worker's (its host id names another PID
    namespace); a worker id of this very container whose process is gone is taken over at once."""
    from autosched.db.leases import host_id

    dead = subprocess.Popen(["true"])
    dead.wait()
    db = open_database(str(tmp_path / "c.db"))
    other_container = host_id().rsplit("/", 1)[0] + "/4026999999"
    assert db.claim("t", f"{other_container}:{dead.pid}:0.000:abcdef", 60)
    assert not db.leases().try_hold("t")
    assert db.claim("u", f"{host_id()}:{dead.pid}:0.000:abcdef", 60)
    assert db.leases().try_hold("u")
    db.close()


@pytest.mark.parametrize("left_behind", [["BEGIN IMMEDIATE"], ["BEGIN", "SELECT * FROM autosched_claims"]],
                         ids=["write-lock", "read-lock"])
def test_a_release_waits_seconds_not_a_minute_for_a_lock_this_process_left_behind(tmp_path, caplog, left_behind):
    """Ctrl-C inside a transaction can leave a connection of this very process holding SQLite's write lock, or a
    read lock that the release's commit waits on; the claims released on the way out must not wait out the 60 s
    busy timeout (they expire anyway)."""
    import sqlite3

    from autosched.db import sql

    db = SQLDatabase(str(tmp_path / "c.db"))
    leases = Leases(db, worker_id="me")
    assert leases.try_hold("t1")
    stuck = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    for sql_text in left_behind:  # a lock never let go
        stuck.execute(sql_text).fetchall()
    start = time.perf_counter()
    leases.release("t1")  # warns, does not raise
    assert time.perf_counter() - start < sql.RELEASE_WAIT_S + 3
    assert "could not release the claim on task t1" in caplog.text
    stuck.rollback()
    stuck.close()
    with db.engine.connect() as conn:  # the pooled connection waits as long as ever for other writes
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == sql.SQLITE_WAIT_S * 1000
    db.release("t1", "me")
    assert db.claims() == []
    db.close()
