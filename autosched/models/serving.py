"""The serving call: arrays in, arrays out, with as little as possible between the caller and the kernels.

Set up once per compiled model: the VM function, one 64-byte-aligned staging tensor per input and the checks
to run. Per call: an input that is already a C-contiguous, 64-byte-aligned array of the right dtype (numpy,
torch or anything with ``__dlpack__``) is passed to the kernels without a copy; any other is copied into its
staging tensor (no allocation). Outputs come back as zero-copy views of the tensors the VM allocated for
this call (numpy arrays, or torch tensors when the inputs were torch tensors), or are written into
caller-given arrays (``out=``). Not thread-safe: one call at a time per compiled model (as TVM's VM).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autosched._tvm import cpu_device, tvm, tvm_ffi
from autosched.errors import UserInputError
from autosched.models.frontends import InputSpec

ALIGNMENT = 64  # bytes: TVM's kernels may assume it (aligned vector loads), so unaligned data is copied


class Caller:
    """Calls one VM function with the model's inputs; see the module docstring."""

    def __init__(self, vm_function: Any, inputs: Sequence[InputSpec]):
        self.function = vm_function
        self.specs = list(inputs)
        self.dtypes = [np.dtype(s.dtype) for s in self.specs]
        staging = [tvm.runtime.empty(s.shape, s.dtype, cpu_device()) for s in self.specs]
        self.staging = staging
        self.staging_views = [np.from_dlpack(t) for t in staging]
        self.staging_ptrs = {v.ctypes.data for v in self.staging_views}

    def __call__(self, arrays: Sequence[Any], out: Sequence[np.ndarray] | None = None) -> list[Any]:
        if len(arrays) != len(self.specs):
            raise UserInputError(f"the model takes {len(self.specs)} inputs "
                                 f"({', '.join(s.name for s in self.specs)}), got {len(arrays)}")
        as_torch = _is_torch(arrays[0]) if arrays else False
        args = [self._argument(i, a) for i, a in enumerate(arrays)]
        outputs = _flatten(self.function(*args))
        if out is not None:
            return _write_into(outputs, out)
        views = [self._detached(np.from_dlpack(t)) for t in outputs]
        if as_torch:
            import torch

            return [torch.from_numpy(v) for v in views]
        return views

    def _argument(self, i: int, a: Any) -> Any:
        spec = self.specs[i]
        if tuple(a.shape) != spec.shape:
            raise UserInputError(f"input {spec.name!r} must have shape {spec.shape}, got {tuple(a.shape)}")
        if isinstance(a, np.ndarray):
            if a.dtype == self.dtypes[i] and a.flags.c_contiguous and a.ctypes.data % ALIGNMENT == 0:
                return tvm_ffi.from_dlpack(a, require_alignment=ALIGNMENT)
            np.copyto(self.staging_views[i], a, casting="same_kind")
            return self.staging[i]
        if _is_torch(a):
            if (a.device.type == "cpu" and str(a.dtype).removeprefix("torch.") == spec.dtype
                    and a.is_contiguous() and a.data_ptr() % ALIGNMENT == 0):
                return tvm_ffi.from_dlpack(a, require_alignment=ALIGNMENT)
            np.copyto(self.staging_views[i], a.detach().cpu().numpy(), casting="same_kind")
            return self.staging[i]
        np.copyto(self.staging_views[i], np.asarray(a), casting="same_kind")
        return self.staging[i]

    def _detached(self, view: np.ndarray) -> np.ndarray:
        """An output that is a staging tensor (a model returning its input) is copied: the next call reuses it."""
        return view.copy() if view.ctypes.data in self.staging_ptrs else view


def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _flatten(result: Any) -> list[Any]:
    if isinstance(result, tvm.runtime.Tensor):
        return [result]
    return [t for item in result for t in _flatten(item)]


def _write_into(outputs: list[Any], out: Sequence[Any]) -> list[Any]:
    if len(out) != len(outputs):
        raise UserInputError(f"out= must hold {len(outputs)} arrays (one per output), got {len(out)}")
    for i, (t, dest) in enumerate(zip(outputs, out, strict=True)):
        got = np.from_dlpack(t)
        target = dest.numpy() if _is_torch(dest) else dest
        if tuple(target.shape) != got.shape:
            raise UserInputError(f"out[{i}] must have shape {got.shape}, got {tuple(target.shape)}")
        np.copyto(target, got, casting="same_kind")
    return list(out)
