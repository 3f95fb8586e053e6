"""A TVM RPC tracker and servers on 127.0.0.1, for tests and benchmarks of measuring through RPC."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 180.0  # a server imports TVM before registering: slow on a loaded machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackCluster:
    """A TVM RPC tracker and ``n_servers`` servers under ``key``, each a process group of its own (a TVM server
    runs its listen loop in a child process), so that one can be killed whole. Started on construction; ``stop``
    (or leaving a ``with`` block) kills them all. Their output goes to ``log_dir/*.log``."""

    def __init__(self, n_servers: int, log_dir: Path, key: str):
        self.key, self.log_dir = key, Path(log_dir)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.servers: list[subprocess.Popen] = []
        self.tracker = self._spawn("tracker", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
                                   str(self.port), "--port-end", str(self.port + 1))
        try:
            self._wait(self._tracker_up)
            for i in range(n_servers):
                port = free_port()
                self.servers.append(self._spawn(f"server{i}", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                                "--port", str(port), "--port-end", str(port + 1), "--tracker",
                                                self.address, "--key", key))
            self._wait(lambda: self.n_devices() == n_servers)
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> LoopbackCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def n_devices(self) -> int:
        """Servers registered under the key now (-1: the tracker does not answer)."""
        from autosched.measure.rpc import n_devices

        try:
            return n_devices("127.0.0.1", self.port, self.key)
        except (OSError, ValueError):
            return -1

    def _spawn(self, name: str, module: str, *args: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        return subprocess.Popen([sys.executable, "-m", module, *args], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def _tracker_up(self) -> bool:
        from autosched.measure.rpc import tracker_summary

        try:
            tracker_summary("127.0.0.1", self.port, timeout_s=1.0)
            return True
        except (OSError, ValueError):
            return False

    def _wait(self, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in [self.tracker, *self.servers]):
                logs = {p.name: p.read_text()[-500:] for p in self.log_dir.glob("*.log")}
                raise RuntimeError(f"the RPC tracker or a server did not start: {logs}")
            time.sleep(0.5)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its group: the server and the children it forked
            proc.wait()

    def stop(self) -> None:
        for proc in [*self.servers, self.tracker]:
            self.kill(proc)
