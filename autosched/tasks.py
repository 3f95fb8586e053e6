"""Tasks: one TIR PrimFunc to tune for one target, with a stable key, a weight and a reference."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched._tvm import IRModule, Target, arg_specs, estimate_flops, structural_hash
from autosched.bandwidth import bytes_moved
from autosched.targets import make_target, target_json  # noqa: F401  (re-exported: callers import them from here)
from autosched.workloads import get_workload, reference_outputs

Reference = Callable[[list[np.ndarray]], list[np.ndarray]]

def task_key(mod: IRModule, target: Target, space_version: int) -> str:
    text = f"{structural_hash(mod['main'])}|{target_json(target)}|space-v{space_version}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class Task:
    name: str
    mod: IRModule  # {"main": PrimFunc}
    target: Target
    space_version: int
    flops: float
    weight: int = 1
    n_outputs: int = 1
    reference: Reference | None = None  # None: the unscheduled build is the reference
    info: dict[str, Any] = field(default_factory=dict)
    constants: dict[int, Any] = field(default_factory=dict, repr=False)  # argument position -> the model's value

    @property
    def key(self) -> str:
        return task_key(self.mod, self.target, self.space_version)

    @property
    def target_json(self) -> str:
        return target_json(self.target)

    def arg_specs(self) -> list[tuple[tuple[int, ...], str]]:
        return arg_specs(self.mod["main"])

    @property
    def n_bytes(self) -> int:
        """Bytes its buffers hold, inputs and outputs: what a memory-bound kernel moves at least (``bandwidth``)."""
        return bytes_moved(self.arg_specs())

    def about(self) -> dict[str, str]:
        """What a person reads to tell this task from others (``describe_task``)."""
        return describe_task(self.name, str(self.info.get("pattern", "")), self.arg_specs(), self.n_outputs,
                             self.target_json)

    def random_inputs(self, seed: int, domain: str = "normal") -> list[np.ndarray]:
        """Inputs to check and time the task with: the model's own constants where the task has them
        (``constants``: weights, masks, position tables); other floats drawn from ``domain`` (see
        ``INPUT_DOMAINS``); integers zero (in range for any index or position, a valid mask)."""
        check_fits_in_memory(self.name, self.arg_specs())
        rng = np.random.default_rng(seed)
        low, high = INPUT_DOMAINS[domain]
        out = []
        for i, (shape, dtype) in enumerate(self.arg_specs()[: -self.n_outputs]):
            if i in self.constants:
                out.append(np.asarray(self.constants[i].numpy(), dtype))
            elif not np.issubdtype(np.dtype(dtype), np.floating):
                out.append(np.zeros(shape, dtype))
            elif low is None:
                out.append(rng.standard_normal(shape).astype(dtype))
            else:
                out.append(rng.uniform(low, high, shape).astype(dtype))
        return out


def check_fits_in_memory(name: str, specs: list[tuple[tuple[int, ...], str]]) -> None:
    """A task whose arguments (inputs and outputs, as measured) take more than this machine's memory is refused
    in one line before anything is allocated (a --shape of 2**31 sizes, not an internal error)."""
    import math
    import os

    from autosched.errors import UserInputError

    n_bytes = sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in specs)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not on this OS: numpy's own check stands
        return
    if n_bytes > memory:
        raise UserInputError(f"{name}: its arguments take {n_bytes / 2**30:.3g} GiB, more than this machine's "
                             f"{memory / 2**30:.3g} GiB of memory: tune a smaller shape")


# Distributions of non-constant float inputs, tried in order until the reference output is finite:
# standard normal, then positive values of moderate size (inside the domains of log, sqrt, pow and division).
INPUT_DOMAINS: dict[str, tuple[float | None, float | None]] = {"normal": (None, None), "positive": (0.5, 1.5)}


def describe_target(target: str) -> str:
    """A target JSON in a few words: ``llvm znver5 x4``, ``cuda sm_90``."""
    t = json.loads(target)
    cores = t.get("num-cores")
    return " ".join(str(p) for p in (t.get("kind", "?"), t.get("mcpu") or t.get("arch"), cores and f"x{cores}") if p)


def describe_shapes(specs: list[tuple[tuple[int, ...], str]], n_outputs: int = 1, max_chars: int = 160) -> str:
    """Argument shapes, inputs then outputs: ``1x768, 768x768 -> 1x768 float32`` (each dtype where they differ)."""
    one_dtype = len({d for _, d in specs}) == 1
    text = lambda group: ", ".join("x".join(map(str, s)) + ("" if one_dtype else f" {d}") for s, d in group)  # noqa: E731
    out = f"{text(specs[:-n_outputs])} -> {text(specs[-n_outputs:])}" + (f" {specs[0][1]}" if one_dtype else "")
    return out if len(out) <= max_chars else out[: max_chars - 3] + "..."


def describe_task(name: str, pattern: str, specs: list[tuple[tuple[int, ...], str]], n_outputs: int,
                  target: str) -> dict[str, str]:
    """A task's name, fusion pattern (empty for an operator or program), shapes and target, as short strings."""
    return {"task": name, "pattern": pattern, "shape": describe_shapes(specs, n_outputs),
            "target": describe_target(target)}


def op_task(op: str, shape: tuple[int, ...], target: Target, space_version: int) -> Task:
    """A catalog operator as a task, with its numpy reference."""
    wl = get_workload(op)
    full = wl.normalise(shape)
    mod = wl.prim_func(full)
    return Task(
        name=f"{op}_{'x'.join(map(str, shape))}",
        mod=mod,
        target=target,
        space_version=space_version,
        flops=wl.flops(*full),
        reference=lambda inputs: [reference_outputs(op, full, inputs)],
        info={"op": op, "shape": list(shape)},
    )


def primfunc_task(name: str, mod: IRModule, target: Target, space_version: int, weight: int = 1,
                  n_outputs: int = 1) -> Task:
    """Any PrimFunc as a task; the unscheduled build serves as the reference."""
    if not isinstance(mod, IRModule):
        mod = IRModule({"main": mod})
    return Task(name, mod, target, space_version, estimate_flops(mod), weight, n_outputs)

