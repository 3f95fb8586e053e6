"""The serving call: arrays in, arrays out, with as little as possible between the caller and the kernels.

Set up once per compiled model: the VM function, one 64-byte-aligned staging tensor per input and the checks
to run. Per call: an input that is already a C-contiguous, 64-byte-aligned array of the right dtype (numpy,
torch or anything with ``__dlpack__``) is passed to the kernels without a copy; any other is copied into its
staging tensor (no allocation). Outputs come back as zero-copy views of the tensors the VM allocated for
this call (numpy arrays, or torch tensors when the inputs were torch tensors), or are written into
caller-given arrays (``out=``). Thread-safe by serialising: TVM's VM and the staging tensors serve one call at a
time, so calls from several threads to one compiled model take turns (a lock per model; each thread gets its
own outputs). For calls in parallel, load the model once per thread.

On a GPU (``Caller(..., device=tvm.cuda(0))``, which makes a ``DeviceCaller``: decided once, at construction)
inputs are copied into staging tensors on the device, except a torch tensor already there (contiguous, aligned,
of the right dtype), which is passed as it is; outputs are copied back as numpy arrays, or come as torch
tensors: on the device (no copy) for inputs on it, else on the CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from autosched._tvm import cpu_device, tvm, tvm_ffi
from autosched.errors import UserInputError
from autosched.graph.frontends import InputSpec

ALIGNMENT = 64  # bytes: TVM's kernels may assume it (aligned vector loads), so unaligned data is copied


class Caller:
    """Calls one VM function with the model's inputs; see the module docstring."""

    def __new__(cls, vm_function: Any, inputs: Sequence[InputSpec], device: Any = None) -> Caller:
        if cls is Caller and device is not None and device.dlpack_device_type() != _CPU:
            cls = DeviceCaller
        return super().__new__(cls)

    def __init__(self, vm_function: Any, inputs: Sequence[InputSpec], device: Any = None):
        self.function = vm_function
        self.specs = list(inputs)
        self.dtypes = [np.dtype(s.dtype) for s in self.specs]
        staging = [tvm.runtime.empty(s.shape, s.dtype, cpu_device()) for s in self.specs]
        self.staging = staging
        self.staging_views = [np.from_dlpack(t) for t in staging]
        self.staging_ptrs = {v.ctypes.data for v in self.staging_views}
        self.lock = threading.RLock()  # one call at a time: the VM and the staging tensors are shared

    def __call__(self, arrays: Sequence[Any], out: Sequence[np.ndarray] | None = None) -> list[Any]:
        with self.lock:
            return self._call(arrays, out)

    def _call(self, arrays: Sequence[Any], out: Sequence[np.ndarray] | None) -> list[Any]:
        if len(arrays) != len(self.specs):
            raise _wrong_count(self.specs, len(arrays))
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
            raise _wrong_shape(spec, a)
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


class DeviceCaller(Caller):
    """``Caller`` for a model on a GPU (made by ``Caller(..., device)``); see the module docstring."""

    def __init__(self, vm_function: Any, inputs: Sequence[InputSpec], device: Any = None):
        self.function = vm_function
        self.specs = list(inputs)
        self.dtypes = [np.dtype(s.dtype) for s in self.specs]
        self.device = device
        self.staging = [tvm.runtime.empty(s.shape, s.dtype, device) for s in self.specs]
        self.staging_views = [np.empty(s.shape, s.dtype) for s in self.specs]  # host side: conversions, buckets
        self.staging_ptrs = {t.data_ptr() for t in self.staging}
        self.lock = threading.RLock()

    def _call(self, arrays: Sequence[Any], out: Sequence[Any] | None) -> list[Any]:
        if len(arrays) != len(self.specs):
            raise _wrong_count(self.specs, len(arrays))
        args = [self._argument(i, a) for i, a in enumerate(arrays)]
        outputs = _flatten(self.function(*args))
        if out is not None:
            return _write_into_host(outputs, out)
        if arrays and _is_torch(arrays[0]):
            return self._as_torch(outputs, arrays[0])
        return [t.numpy() for t in outputs]

    def _argument(self, i: int, a: Any) -> Any:
        spec = self.specs[i]
        if tuple(a.shape) != spec.shape:
            raise _wrong_shape(spec, a)
        if _is_torch(a):
            if self._on_device(a):
                return self._from_torch_on_device(i, a)
            a = a.detach().cpu().numpy()
        elif not isinstance(a, np.ndarray):
            a = np.asarray(a)
        if a.dtype != self.dtypes[i] or not a.flags.c_contiguous:
            np.copyto(self.staging_views[i], a, casting="same_kind")
            a = self.staging_views[i]
        return self.staging[i].copyfrom(a)

    def _on_device(self, t: Any) -> bool:
        """Whether a torch tensor is on this caller's GPU."""
        return (t.device.type == "cuda" and self.device.dlpack_device_type() == _CUDA
                and (t.device.index or 0) == self.device.index)

    def _from_torch_on_device(self, i: int, t: Any) -> Any:
        """A torch tensor on the GPU: passed as it is where it can be, else converted and copied there."""
        import torch

        spec = self.specs[i]
        if str(t.dtype).removeprefix("torch.") == spec.dtype and t.is_contiguous() and t.data_ptr() % ALIGNMENT == 0:
            return tvm_ffi.from_dlpack(t, require_alignment=ALIGNMENT)
        converted = t.detach().to(getattr(torch, spec.dtype)).contiguous()
        return self.staging[i].copyfrom(tvm_ffi.from_dlpack(converted))

    def _as_torch(self, outputs: list[Any], first: Any) -> list[Any]:
        """Outputs as torch tensors: on the GPU without a copy when the inputs are there, else on the CPU."""
        import torch

        if self._on_device(first):
            return [torch.from_dlpack(self._detached_tensor(t)) for t in outputs]
        return [torch.from_numpy(t.numpy()) for t in outputs]

    def _detached_tensor(self, t: Any) -> Any:
        """An output that is a staging tensor (a model returning its input) is copied: the next call reuses it."""
        return t.copyto(self.device) if t.data_ptr() in self.staging_ptrs else t


_CPU, _CUDA = 1, 2  # DLPack device types


def _wrong_count(specs: list[InputSpec], n: int) -> UserInputError:
    return UserInputError(f"the model takes {len(specs)} inputs ({', '.join(s.name for s in specs)}), got {n}")


def _wrong_shape(spec: InputSpec, a: Any) -> UserInputError:
    return UserInputError(f"input {spec.name!r} must have shape {spec.shape}, got {tuple(a.shape)}")


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


def _write_into_host(outputs: list[Any], out: Sequence[Any]) -> list[Any]:
    """``_write_into`` for outputs on a GPU: copied to numpy arrays, or into torch tensors on any device."""
    if len(out) != len(outputs):
        raise UserInputError(f"out= must hold {len(outputs)} arrays (one per output), got {len(out)}")
    for i, (t, dest) in enumerate(zip(outputs, out, strict=True)):
        if tuple(dest.shape) != tuple(t.shape):
            raise UserInputError(f"out[{i}] must have shape {tuple(t.shape)}, got {tuple(dest.shape)}")
        if _is_torch(dest):
            import torch

            dest.copy_(torch.from_dlpack(t) if dest.device.type != "cpu" else torch.from_numpy(t.numpy()))
        else:
            np.copyto(dest, t.numpy(), casting="same_kind")
    return list(out)
