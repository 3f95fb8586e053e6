"""Where a compiled model's time goes: every call the VM makes (kernels and its own builtins), timed one by one.

The VM's instrument hook runs before and after each call; the device is synchronised on both sides, so each
kernel's time includes its launch but no other kernel's work. The sum over calls is close to a whole call when
the VM adds little; a large difference between the sum of the kernels and the whole model is the VM's (or the
launches') overhead, not the kernels'.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autosched._tvm import relax, tvm

if TYPE_CHECKING:
    from autosched.deploy.build import CompiledModel

PREPACKED = "_prepacked"  # suffix of a group whose weights were laid out ahead of time (CPU builds)


@dataclass
class CallTime:
    name: str  # the kernel's (fusion group's) or the VM builtin's name
    calls: int  # calls per inference
    ms: float  # milliseconds per inference, all its calls together
    source: str  # tuned | default | dlight | unscheduled for a fusion group, "vm" for a VM builtin, else ""


@dataclass
class Profile:
    calls: list[CallTime]  # slowest first
    whole_ms: float  # one inference without the hook (median)

    @property
    def kernels_ms(self) -> float:
        return sum(c.ms for c in self.calls if c.source != "vm")

    def table(self, top: int = 12) -> str:
        """The ``top`` slowest kernels (share: of all kernels' time), then the VM's builtins and the whole call."""
        kernels = [c for c in self.calls if c.source != "vm"]
        total = self.kernels_ms or 1.0
        lines = [f"{'kernel':48s} {'n':>3s} {'ms':>8s} {'share':>6s}  schedule"]
        for c in kernels[:top]:
            lines.append(f"{c.name[:48]:48s} {c.calls:3d} {c.ms:8.3f} {c.ms / total:6.1%}  {c.source}")
        builtins = [c for c in self.calls if c.source == "vm"]
        lines.append(f"kernels {self.kernels_ms:.3f} ms ({len(kernels)} distinct); the VM's builtins "
                     f"{sum(c.ms for c in builtins):.3f} ms ({sum(c.calls for c in builtins)} calls, the hook's own "
                     f"cost included); whole call without the hook {self.whole_ms:.3f} ms")
        return "\n".join(lines)


def profile(compiled: CompiledModel, arrays: list[np.ndarray], runs: int = 5) -> Profile:
    """Time every call of ``compiled``'s entry function on ``arrays`` (the mean of ``runs`` inferences)."""
    device = compiled.device
    vm = relax.VirtualMachine(compiled.executable, device)
    args = [tvm.runtime.tensor(np.ascontiguousarray(a, s.dtype), device)
            for s, a in zip(compiled.inputs, arrays, strict=True)]
    main = vm[compiled.entry]
    main(*args)  # warm-up: first-call allocations and module loading
    whole = []
    for _ in range(runs):
        device.sync()
        start = time.perf_counter()
        main(*args)
        device.sync()
        whole.append(time.perf_counter() - start)

    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    started: list[float] = []

    def instrument(func: Any, name: str, before: bool, ret: Any, *call_args: Any) -> int:
        device.sync()
        if before:
            started.append(time.perf_counter())
        else:
            total[name] += time.perf_counter() - started.pop()
            count[name] += 1
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    vm.set_instrument(instrument)
    for _ in range(runs):
        vm[compiled.entry](*args)

    def source(name: str) -> str:
        if name.startswith("vm.builtin."):
            return "vm"
        return compiled.sources.get(name.removesuffix(PREPACKED), "")

    calls = [CallTime(name, count[name] // runs, secs / runs * 1e3, source(name)) for name, secs in total.items()]
    calls.sort(key=lambda c: -c.ms)
    return Profile(calls, float(np.median(whole)) * 1e3)
