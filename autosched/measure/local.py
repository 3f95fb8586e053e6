"""Local builder and runner: persistent isolated worker processes with timeouts.

Workers stay alive between candidates (a compile costs 0.05-0.2 s, a worker start ~2-5 s); a candidate
that crashes or hangs kills its worker, is recorded with its status, and the next call starts a new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from autosched._tvm import PopenPoolExecutor
from autosched.config import resolve_threads
from autosched.measure import worker
from autosched.measure.base import Builder, Runner, TaskIO
from autosched.records import BuildResult, Candidate, MeasureResult, Status
from autosched.scratch import ScratchDir

log = logging.getLogger("autosched.measure")


def remove_artifacts(artifact_path: str | None) -> None:
    """A measured candidate's library and its timing spec, once they are no longer needed."""
    for path in (artifact_path, f"{artifact_path}.timed.json"):
        if artifact_path and os.path.exists(path):
            os.remove(path)


def _one_line(err: BaseException) -> str:
    """The last line of an error (worker errors carry the whole traceback as their message)."""
    msg = err.args[0] if err.args and isinstance(err.args[0], str) else str(err)
    text = msg.strip().splitlines()
    tail = [t for t in text if t.strip()][-1:] or [type(err).__name__]
    return f"{type(err).__name__}: {tail[0][:300]}"


class _Pool:
    """A PopenPoolExecutor whose workers are started before the first candidate's timeout runs.

    A worker that crashes or times out is killed by TVM's PopenWorker and restarted lazily, its
    initializer running before (not within) the next candidate's timeout.
    """

    def __init__(self, n_workers: int, timeout_s: float, n_threads: int | None = None):
        self.n_workers, self.timeout_s, self.n_threads = n_workers, timeout_s, n_threads
        self._pool: PopenPoolExecutor | None = None

    def _fresh(self) -> PopenPoolExecutor:
        pool = PopenPoolExecutor(max_workers=self.n_workers, timeout=self.timeout_s,
                                 initializer=worker.init_worker, initargs=(self.n_threads,))
        list(pool.map_with_error_catching(lambda _: worker.ping(), range(self.n_workers)))
        return pool

    def submit(self, fn, *args) -> Future:
        if self._pool is None:
            self._pool = self._fresh()
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            pool.shutdown(wait=False)
        except Exception:  # noqa: BLE001
            log.info("worker pool shut down the hard way", exc_info=True)
            # TVM's PopenWorker.kill is not thread-safe: after a Ctrl-C (which reaches the workers too) the job
            # thread that saw its worker die may be killing it at the same moment. Kill what is left directly,
            # so that no job thread stays blocked on a live worker and the process can exit.
            for popen_worker in list(getattr(pool, "_worker_map", {}).values()):
                proc = getattr(popen_worker, "_proc", None)
                with contextlib.suppress(Exception):
                    proc.kill()
            with contextlib.suppress(Exception):
                pool._lock.release()  # TVM's shutdown raised while holding it: its __del__ would deadlock
            pool._shutdown = True
            with contextlib.suppress(Exception):
                pool._threadpool.shutdown(wait=False)


@contextlib.contextmanager
def isolated(timeout_s: float, n_threads: int | None = None) -> Iterator[Callable[..., Any]]:
    """A worker process of its own (TVM's popen pool) with ``n_threads`` CPU threads: ``call(fn, *args)`` runs
    ``fn(*args)`` there, ended after ``timeout_s``, and returns its result or raises its error here (a timeout:
    TimeoutError; a crash: ChildProcessError). The worker ends with the context."""
    pool = _Pool(1, timeout_s, n_threads)
    try:
        yield lambda fn, *args: pool.submit(fn, *args).result()
    finally:
        pool.close()


class LocalBuilder(Builder):
    build_fn = staticmethod(worker.build)  # what a build worker runs (tests inject faults here)

    def __init__(self, target_json: str, n_workers: int | None = None, timeout_s: float = 60.0,
                 work_dir: str | None = None):
        self.target_json = target_json
        self._pool = _Pool(resolve_threads(n_workers), timeout_s)
        self._other_pools: dict[float, _Pool] = {}  # by timeout: builds given another limit (started when asked)
        self._tmp = ScratchDir("build") if work_dir is None else None
        self.work_dir = work_dir or self._tmp.name
        self._count = 0

    def build(self, candidates: list[Candidate], timeout_s: float | None = None) -> list[BuildResult]:
        pool = self._pool
        if timeout_s is not None and timeout_s != pool.timeout_s:
            pool = self._other_pools.setdefault(timeout_s, _Pool(pool.n_workers, timeout_s))
        jobs = []
        for cand in candidates:
            self._count += 1
            path = os.path.join(self.work_dir, f"cand{self._count}.so")
            jobs.append((cand, path, pool.submit(self.build_fn, cand.mod_json, self.target_json, path)))
        out = []
        for cand, path, fut in jobs:
            try:
                out.append(BuildResult(cand, path, build_s=fut.result()))
            except TimeoutError:
                out.append(BuildResult(cand, None, f"build timed out after {pool.timeout_s:g} s", Status.TIMEOUT))
            except Exception as err:  # noqa: BLE001 - any failure is this candidate's result
                out.append(BuildResult(cand, None, _one_line(err), Status.BUILD_ERROR))
        return out

    def close(self) -> None:
        for pool in (self._pool, *self._other_pools.values()):
            pool.close()
        if self._tmp is not None:
            self._tmp.cleanup()


class LocalRunner(Runner):
    """Runs one candidate at a time (so timings do not compete), checked against the reference first.

    Candidates slower than ``cutoff_ratio`` x the best seen for the task on their first run are timed once.
    """

    def __init__(self, n_threads: int | None = None, timeout_s: float = 30.0, repeat: int = 3,
                 min_repeat_ms: int = 25, rtol: float = 1e-3, atol: float = 1e-4, device: str = "cpu",
                 cutoff_ratio: float | None = 3.0, condition: str = "warm"):
        self.repeat, self.min_repeat_ms, self.rtol, self.atol, self.device = repeat, min_repeat_ms, rtol, atol, device
        self.cutoff_ratio, self.condition = cutoff_ratio, condition  # worker.TIMING_CONDITIONS
        self._best_s: dict[str, float] = {}  # per task (io path): fastest median so far
        self._pool = _Pool(1, timeout_s, n_threads)

    def run(self, builds: list[BuildResult], io: TaskIO) -> list[MeasureResult]:
        return [self._run_one(b, io) for b in builds]

    def _run_one(self, b: BuildResult, io: TaskIO) -> MeasureResult:
        if b.status is not Status.OK:
            return MeasureResult(b.status, error=b.error, build_s=b.build_s)
        start = time.perf_counter()
        best = self._best_s.get(io.io_path)
        cutoff = self._cutoff_s(io, best, self.cutoff_ratio)
        try:
            res = self._pool.submit(worker.run, b.artifact_path, io.io_path, io.n_outputs, self.device,
                                    self.repeat, self.min_repeat_ms, self.rtol, self.atol, True, cutoff,
                                    self.condition).result()
            status, lat, err = Status(res["status"]), res["latencies_s"], res["error"]
            if status is Status.OK and len(lat) == self.repeat:
                self._best_s[io.io_path] = min(statistics.median(lat), best or float("inf"))
        except TimeoutError:
            status, lat, err = Status.TIMEOUT, [], f"run timed out after {self._pool.timeout_s:g} s"
        except Exception as e:  # noqa: BLE001 - a crash is this candidate's result
            status, lat, err = Status.RUN_ERROR, [], _one_line(e)
        finally:
            remove_artifacts(b.artifact_path)
        return MeasureResult(status, lat, err, build_s=b.build_s, run_s=time.perf_counter() - start)

    def reference_outputs(self, lib_path: str, io: TaskIO) -> list:
        """Run an (unscheduled) library once and return its outputs, to serve as the reference."""
        res = self._pool.submit(worker.run, lib_path, io.io_path, io.n_outputs, self.device,
                                1, 0, 0.0, 0.0, False).result()
        return res["outputs"]

    def close(self) -> None:
        self._pool.close()
