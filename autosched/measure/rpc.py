"""RPC runner: measures built libraries on the devices registered under a key at a TVM RPC tracker.

Each candidate gets its own RPC session, requested from the tracker: the tracker hands out the free devices,
so as many candidates run at once as devices are registered. The server runs each session in a fresh process
and kills it after ``timeout_s``; the client side of each session runs in an isolated worker process too. A
crash, a hang or a lost connection thus costs that one candidate, recorded with its status. Checking and
timing are the local runner's (``worker.measure``).
"""

from __future__ import annotations

import json
import logging
import socket
import statistics
import struct
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait

from autosched.errors import AutoschedError, UserInputError
from autosched.measure import worker
from autosched.measure.base import Runner, TaskIO
from autosched.measure.local import _one_line, _Pool, remove_artifacts
from autosched.records import BuildResult, MeasureResult, Status

log = logging.getLogger("autosched.measure.rpc")

_CLIENT_GRACE_S = 10.0  # beyond a session's timeout: the tracker request, the upload, the server's timeout reply


class DevicesLostError(AutoschedError):
    """Every device under the key has left the tracker: measuring cannot go on."""


def tracker_summary(host: str, port: int, timeout_s: float = 5.0) -> dict:
    """The tracker's summary (servers and queues). OSError/ValueError if nothing, or no tracker, answers there.

    TVM's own client retries a refused connection for a minute; a wrong address should fail at once."""
    from tvm.rpc import base

    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        reply = base.recvall(sock, 4)
        if struct.unpack("<i", reply)[0] != base.RPC_TRACKER_MAGIC:
            raise ValueError("not a TVM RPC tracker")
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        code, summary = base.recvjson(sock)
    if code != base.TrackerCode.SUCCESS:
        raise ValueError(f"unexpected tracker reply {code!r}")
    return summary


def n_devices(host: str, port: int, key: str) -> int:
    """How many servers are registered under ``key`` (free or busy)."""
    return sum(s["key"] == f"server:{key}" for s in tracker_summary(host, port)["server_info"])


def check_tracker(tracker: tuple[str, int], key: str) -> int:
    """The number of devices under ``key`` at the tracker (host, port) (``TuneConfig.tracker``); UserInputError
    (one line) if nothing or no tracker answers there, or no device is registered under the key."""
    host, port = tracker
    address = f"{host}:{port}"
    try:
        summary = tracker_summary(host, port)
    except (OSError, ValueError, json.JSONDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err) or type(err).__name__
        raise UserInputError(f"--rpc {address}: no TVM RPC tracker answers there ({reason}); start one with "
                             f"python -m tvm.exec.rpc_tracker --port {port}, or fix the address") from err
    registered = [s["key"].removeprefix("server:") for s in summary["server_info"]]
    count = registered.count(key)
    if not count:
        known = f"it has devices under {', '.join(sorted(set(registered)))}" if registered else "it has no devices"
        raise UserInputError(f"--key {key}: no device registered under this key at the tracker {address} ({known}); "
                             f"start one with python -m tvm.exec.rpc_server --tracker {address} --key {key}")
    return count


class RPCRunner(Runner):
    """The local runner's contract on remote devices: candidates checked against the reference, then timed with
    ``time_evaluator`` on the device (repeat / min_repeat_ms); one candidate per device at a time.

    Candidates slower than ``cutoff_ratio`` x the best seen for the task on their first run are timed once.
    """

    def __init__(self, tracker: tuple[str, int], key: str, n_threads: int | None = None, timeout_s: float = 30.0,
                 repeat: int = 3, min_repeat_ms: int = 25, rtol: float = 1e-3, atol: float = 1e-4,
                 device: str = "cpu", cutoff_ratio: float | None = 3.0, condition: str = "warm"):
        self.tracker, self.key = tracker, key
        self.condition = condition  # worker.TIMING_CONDITIONS
        self.n_threads, self.timeout_s = n_threads, timeout_s
        self.repeat, self.min_repeat_ms, self.rtol, self.atol, self.device = repeat, min_repeat_ms, rtol, atol, device
        self.cutoff_ratio = cutoff_ratio
        self._best_s: dict[str, float] = {}  # per task (io path): fastest median so far
        self._n_workers = check_tracker(tracker, key)  # devices now; later arrivals wait for a free worker
        self._pool = _Pool(self._n_workers, timeout_s + _CLIENT_GRACE_S)

    def run(self, builds: list[BuildResult], io: TaskIO) -> list[MeasureResult]:
        results: list[MeasureResult | None] = [None] * len(builds)
        todo = []
        for i, b in enumerate(builds):
            if b.status is Status.OK:
                todo.append(i)
            else:
                results[i] = MeasureResult(b.status, error=b.error, build_s=b.build_s)
        running: dict[Future, tuple[int, float]] = {}
        while todo or running:
            n_free = self._n_free_slots(len(running))
            while todo and n_free > 0:
                i = todo.pop(0)
                running[self._submit(builds[i], io)] = (i, time.perf_counter())
                n_free -= 1
            done, _ = wait(running, timeout=2.0, return_when=FIRST_COMPLETED)
            for fut in done:
                i, start = running.pop(fut)
                results[i] = self._result(fut, builds[i], io, start)
        return results  # type: ignore[return-value]

    def _n_free_slots(self, n_running: int) -> int:
        """Devices under the key now, less the sessions this runner holds (the tracker would queue the rest,
        and the wait would count against their timeouts)."""
        try:
            n = min(n_devices(*self.tracker, self.key), self._n_workers)
        except (OSError, ValueError) as err:
            raise DevicesLostError(f"the tracker {self._address} stopped answering ({err}): restart it and its "
                                   "servers, then run the same command again to resume") from err
        if n == 0 and n_running == 0:
            raise DevicesLostError(f"no device left under {self.key} at the tracker {self._address}: restart the "
                                   "servers, then run the same command again to resume")
        return n - n_running

    @property
    def _address(self) -> str:
        return f"{self.tracker[0]}:{self.tracker[1]}"

    def _submit(self, b: BuildResult, io: TaskIO) -> Future:
        cutoff = self._cutoff_s(io, self._best_s.get(io.io_path), self.cutoff_ratio)
        return self._pool.submit(worker.run_remote, self.tracker, self.key, b.artifact_path, io.io_path,
                                 io.n_outputs, self.device, self.repeat, self.min_repeat_ms, self.rtol, self.atol,
                                 True, cutoff, self.timeout_s, self.n_threads, self.condition)

    def _result(self, fut: Future, b: BuildResult, io: TaskIO, start: float) -> MeasureResult:
        try:
            res = fut.result()
            status, lat, err = Status(res["status"]), res["latencies_s"], res["error"]
            if status is Status.OK and len(lat) == self.repeat:
                self._best_s[io.io_path] = min(statistics.median(lat), self._best_s.get(io.io_path, float("inf")))
        except TimeoutError:
            status, lat, err = Status.TIMEOUT, [], f"remote run timed out after {self.timeout_s:g} s"
        except Exception as e:  # noqa: BLE001 - a crash or a lost connection is this candidate's result
            status, lat, err = Status.RUN_ERROR, [], _one_line(e)
            if "RPCSessionTimeoutError" in err:  # the server ended the session at its timeout
                status, err = Status.TIMEOUT, f"remote run timed out after {self.timeout_s:g} s"
            elif "kShutdown" in err:  # what TVM's client says when the server side of a session disappears
                err = f"lost the remote session (its process died or the connection broke): {err}"
        finally:
            remove_artifacts(b.artifact_path)
        return MeasureResult(status, lat, err, build_s=b.build_s, run_s=time.perf_counter() - start)

    def reference_outputs(self, lib_path: str, io: TaskIO) -> list:
        """Run an (unscheduled) library once on a remote device and return its outputs, the reference."""
        res = self._pool.submit(worker.run_remote, self.tracker, self.key, lib_path, io.io_path, io.n_outputs,
                                self.device, 1, 0, 0.0, 0.0, False, None, self.timeout_s, self.n_threads).result()
        return res["outputs"]

    def close(self) -> None:
        self._pool.close()
