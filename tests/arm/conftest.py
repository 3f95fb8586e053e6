"""The emulated aarch64 device (``.ci/arm_device``): its Python under qemu-user, and a TVM RPC server there
registered at a tracker on this machine. Skipped, with the reason, where ``.ci/arm_device setup`` has not run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autosched.testing.rpc import START_TIMEOUT_S, LoopbackCluster, free_port

ARM_DEVICE = Path(__file__).resolve().parents[2] / ".ci" / "arm_device"
KEY = "autosched-arm"
RUN_TIMEOUT_S = 300  # a script under qemu: importing TVM alone takes ~15 s on one core


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "arm: runs on the emulated aarch64 device (.ci/arm_device)")


class ArmDevice:
    """The emulated device: ``python(script, *args)`` runs a script with its Python (TVM's aarch64 wheel)."""

    def python(self, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(ARM_DEVICE), "python", *args], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert done.returncode == 0, done.stderr[-3000:]
        return done


@pytest.fixture(scope="session")
def arm_device() -> ArmDevice:
    check = subprocess.run([str(ARM_DEVICE), "check"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.skip(check.stderr.strip() or ".ci/arm_device check failed")
    return ArmDevice()


@pytest.fixture(scope="session")
def arm_rpc(arm_device, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(tracker address, key): a tracker here and one TVM RPC server on the emulated device under ``KEY``."""
    logs = tmp_path_factory.mktemp("arm-rpc")
    cluster = LoopbackCluster(0, logs, KEY)  # the tracker alone
    log = open(logs / "arm-server.log", "w")  # noqa: SIM115 - closed with the server
    server = subprocess.Popen(
        [str(ARM_DEVICE), "serve", str(free_port()), "--tracker", cluster.address, "--key", KEY],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while cluster.n_devices() < 1:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the emulated RPC server did not register: {(logs / 'arm-server.log').read_text()}")
            time.sleep(0.5)
        yield cluster.address, KEY
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        cluster.stop()
