"""One worker's claims on a shared database's tasks: taken, kept alive by a heartbeat, released.

Several workers (processes or machines) tuning one model on one database each work on a task only while they
hold its claim, so no two measure the same task at once. A claim is a lease: it ends ``lease_s`` seconds after
its last renewal, so a dead worker's tasks go to the others (at once when it ran on this machine: its process is
seen to be gone). A background thread renews every held claim each
third of the lease. Holds nest: the model loop holds a task for a round, and the round's ``tune`` holds it again
without a second claim (one worker id per ``Leases``; threads sharing one share its claims).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from autosched.db.base import Database

log = logging.getLogger("autosched.db.leases")

POLL_S = 0.5  # how often a worker waiting for a task held by another looks again


@functools.cache
def host_id() -> str:
    """Where this process's PIDs mean something: the host name, the kernel's boot id and the PID namespace, so that
    two containers with one host name (``--network host``) or a rebooted machine are other hosts, and a PID judged
    "gone" here is truly not running (a container with ``--pid host`` shares the namespace, and sees the PIDs).
    Where /proc lacks them (not Linux), the host name alone."""
    parts = [socket.gethostname().replace(":", "_")]
    for read in (lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8],
                 lambda: str(os.stat("/proc/self/ns/pid").st_ino)):
        try:
            parts.append(read())
        except OSError:
            pass
    return "/".join(parts)


def same_host(host: str) -> bool:
    """Whether a claim's or a trial's ``host`` (``host_id`` of its process) is this one; an id written by an older
    autosched (the host name alone) is judged by the host name, as it was."""
    return host == host_id() or ("/" not in host and host == socket.gethostname().replace(":", "_"))


def new_worker_id() -> str:
    """host id:pid:process start time:random, unique across machines, containers, processes and pid reuse."""
    return f"{host_id()}:{os.getpid()}:{psutil.Process().create_time():.3f}:{uuid.uuid4().hex[:6]}"


def _died_here(worker_id: str) -> bool:
    """Whether the worker ran on this machine and its process is gone (``kill -9``): its claims need not be waited
    out. A worker of another machine, or an id of another form, is judged by its lease alone."""
    try:
        host, pid, started, _ = worker_id.rsplit(":", 3)
        if not same_host(host):  # another machine or container: judged by its lease
            return False
        return abs(psutil.Process(int(pid)).create_time() - float(started)) > 1e-3  # the pid was reused
    except psutil.NoSuchProcess:
        return True
    except (ValueError, psutil.Error):
        return False


def _forever() -> float:
    return float("inf")


LEASE_S = 60.0  # a claim's life after its last renewal: a dead worker's tasks go to the others after this


@dataclass(frozen=True)
class Claim:
    """A worker's lease on a task: no other worker tunes the task until it is released or expires."""

    task_key: str
    worker_id: str
    expires_at: float  # seconds since the epoch, by the database's clock (one clock for all machines)
    n_trials: int = 0  # measurements the worker plans under it (reserved from a budget shared by the workers)


class Leases:
    def __init__(self, db: Database, worker_id: str | None = None, lease_s: float = LEASE_S,
                 poll_s: float = POLL_S):
        self.db, self.worker_id = db, worker_id or new_worker_id()
        self.lease_s, self.poll_s = lease_s, poll_s
        self.lost: set[str] = set()  # claims the heartbeat found taken over (this worker stalled past its lease)
        self._held: dict[str, int] = {}  # task key -> how many holds (nested) are open
        self._lock = threading.Lock()
        self._beat: threading.Thread | None = None

    def held(self) -> set[str]:
        with self._lock:
            return set(self._held)

    def try_hold(self, task_key: str, n_trials: int = 0) -> bool:
        """Claim the task now (or hold it once more if this worker holds it); False if another worker does."""
        with self._lock:
            if task_key in self._held:
                self._held[task_key] += 1
                return True
        if not self.db.claim(task_key, self.worker_id, self.lease_s, n_trials):
            holder = next((c.worker_id for c in self.db.claims() if c.task_key == task_key), None)
            if holder is None or not _died_here(holder):
                return False
            log.info("task %s: its claim's worker %s is gone; taking it over", task_key, holder)
            self.db.release(task_key, holder)
            if not self.db.claim(task_key, self.worker_id, self.lease_s, n_trials):
                return False  # another worker took it over first
        with self._lock:
            self._held[task_key] = 1
            self.lost.discard(task_key)
            if self._beat is None:
                self._beat = threading.Thread(target=self._heartbeat, name="autosched-leases", daemon=True)
                self._beat.start()
        return True

    def hold(self, task_key: str, left_s: Callable[[], float] = _forever) -> bool:
        """Claim the task, waiting while another worker holds it; False once ``left_s()`` (the time budget) is
        over."""
        waited = False
        while not self.try_hold(task_key):
            if left_s() <= 0:
                return False
            if not waited:
                log.info("task %s is held by another worker: waiting for it", task_key)
                waited = True
            time.sleep(min(self.poll_s, left_s()))
        return True

    def release(self, task_key: str) -> None:
        with self._lock:
            depth = self._held.get(task_key, 0) - 1
            if depth < 0:
                return
            if depth > 0:
                self._held[task_key] = depth
                return
            del self._held[task_key]
        self._release(task_key)

    @contextlib.contextmanager
    def holding(self, task_key: str, left_s: Callable[[], float] = _forever) -> Iterator[bool]:
        """``hold`` for the block; yields whether the claim was got."""
        got = self.hold(task_key, left_s)
        try:
            yield got
        finally:
            if got:
                self.release(task_key)

    def in_turn(self, task_keys: Iterable[str], left_s: Callable[[], float] = _forever,
                done: Callable[[str], bool] = lambda key: False) -> Iterator[str]:
        """Each key once, held while the caller works on it (released when it asks for the next). Keys other
        workers hold come later, as their claims end (released or expired), or at once and not held when
        ``done(key)`` says another worker did the work already (a worker that re-claims its task round after
        round would otherwise keep this one waiting); stops early if ``left_s()`` ends."""
        todo = list(task_keys)
        while todo:
            for key in list(todo):
                if self.try_hold(key):
                    todo.remove(key)
                    try:
                        yield key
                    finally:
                        self.release(key)
                elif done(key):
                    todo.remove(key)
                    yield key
            if todo:
                if left_s() <= 0:
                    return
                time.sleep(min(self.poll_s, left_s()))

    def others(self) -> dict[str, Claim]:
        """Other workers' live claims, by task key."""
        return {c.task_key: c for c in self.db.claims() if c.worker_id != self.worker_id}

    def close(self) -> None:
        """Release every claim this worker holds (the heartbeat thread then ends)."""
        with self._lock:
            keys, self._held = list(self._held), {}
        for key in keys:
            self._release(key)

    def _release(self, task_key: str) -> None:
        """Often on the way out of an error (a full disk, Ctrl-C): a failure here must not hide it, and the claim
        expires anyway."""
        try:
            self.db.release(task_key, self.worker_id)
        except Exception as err:
            log.warning("could not release the claim on task %s (it expires within %g s): %s", task_key,
                        self.lease_s, err)

    def _heartbeat(self) -> None:
        while True:
            time.sleep(self.lease_s / 3)
            with self._lock:
                held = list(self._held)
                if not held:
                    self._beat = None
                    return
            for key in held:
                try:
                    renewed = self.db.renew(key, self.worker_id, self.lease_s)
                except Exception as err:  # a busy or failing database: try again at the next beat
                    log.warning("could not renew the claim on task %s: %s", key, err)
                    continue
                if not renewed and key in self.held():  # not released meanwhile: taken over
                    self.lost.add(key)
                    log.warning("the claim on task %s expired and another worker took it over", key)
