"""Compare contenders: check every contender's outputs against a reference, then time them all in interleaved
rounds with one timer (``timing.time_interleaved``). The one way ``autosched run``, the examples and the bench
scripts put autosched beside ONNX Runtime, OpenVINO and PyTorch.

```python
comparison = autosched.compare({"autosched": lambda: compiled(*arrays), **peers.calls}, reference="onnxruntime")
comparison.median_s["autosched"] / comparison.median_s["onnxruntime"]
```

``peer_calls`` makes the peers' calls at their defaults (ONNX Runtime's session, OpenVINO's CPU plugin with the
latency hint and float32, PyTorch eager under ``no_grad``) for one set of inputs; a peer that is not installed
or cannot take the model is left out with the reason (``Peers.missing``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched.deploy.reference import max_relative_error
from autosched.errors import UserInputError
from autosched.timing import time_interleaved

Call = Callable[[], Any]  # one inference of one contender, inputs bound


def as_arrays(out: Any) -> list[np.ndarray]:
    """A contender's outputs as a flat list of numpy arrays: numpy, torch tensors (detached), TVM tensors,
    lists/tuples (nested), mappings (their values in order: ONNX Runtime's dict, Hugging Face's model outputs)."""
    if isinstance(out, np.ndarray):
        return [out]
    if isinstance(out, Mapping):
        return [a for v in out.values() for a in as_arrays(v)]
    if isinstance(out, list | tuple):
        return [a for v in out for a in as_arrays(v)]
    if hasattr(out, "detach"):  # torch
        return [out.detach().cpu().numpy()]
    if hasattr(out, "numpy"):  # tvm.runtime.Tensor
        return [out.numpy()]
    return [np.asarray(out)]


@dataclass
class Comparison:
    """Seconds per call of each timed contender (every round), each contender's max relative error against the
    reference's outputs, and the contenders left untimed with the reason (outputs that differ, a call that failed)."""

    reference: str
    rounds_s: dict[str, list[float]]
    errors: dict[str, float]
    untimed: dict[str, str] = field(default_factory=dict)

    @property
    def median_s(self) -> dict[str, float]:
        return {name: statistics.median(times) for name, times in self.rounds_s.items()}

    def ratio(self, name: str, other: str) -> float:
        """``name``'s median latency over ``other``'s (< 1: ``name`` is faster); nan where either was not timed."""
        medians = self.median_s
        return medians[name] / medians[other] if name in medians and other in medians else float("nan")

    def paired_ratio(self, name: str, other: str) -> float:
        """The median of the per-round ratios (rounds were interleaved, so each pair saw the same machine)."""
        if name not in self.rounds_s or other not in self.rounds_s:
            return float("nan")
        return statistics.median(a / b for a, b in zip(self.rounds_s[name], self.rounds_s[other], strict=True))


def compare(contenders: Mapping[str, Call], reference: str | Sequence[np.ndarray], *, repeat: int = 5,
            min_round_s: float = 0.1, refuse_above: Mapping[str, float] | None = None,
            unchecked: Collection[str] = (), timed: bool = True) -> Comparison:
    """Check, then time. ``reference``: the name of the contender whose outputs are the reference, or the
    reference outputs themselves. ``refuse_above``: contender -> the largest error it may have and still be timed
    (a peer whose outputs differ is reported, not timed); others are timed whatever their error (the caller
    decides what an error means: ``autosched run`` exits 1 above its tolerance), nan where their outputs cannot be
    compared. ``unchecked``: contenders timed without a check (a timer of the kernels, an instrumented run).
    ``timed=False``: check only."""
    if isinstance(reference, str):
        if reference not in contenders:
            raise UserInputError(f"compare: the reference {reference!r} is not a contender: name one of "
                                 f"{', '.join(contenders)} or pass the reference outputs")
        want, label = as_arrays(contenders[reference]()), reference
    else:
        want, label = [np.asarray(w) for w in reference], "the reference outputs"
    errors, untimed, calls = {}, {}, {}
    for name, call in contenders.items():
        if name in unchecked or name == reference:
            errors[name], calls[name] = (0.0 if name == reference else float("nan")), call
            continue
        try:
            got = call()
        except Exception as err:  # a peer's own failure (OpenVINO, PyTorch): reported, never the comparison's
            untimed[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
            continue
        try:
            errors[name] = max_relative_error(as_arrays(got), want)
        except (TypeError, ValueError):  # outputs that are not arrays of numbers
            errors[name] = float("nan")
        limit = (refuse_above or {}).get(name)
        if limit is not None and not errors[name] <= limit:
            untimed[name] = f"outputs differ from {label}'s: max relative error {errors[name]:.1e} > {limit:g}"
            continue
        calls[name] = call
    rounds = time_interleaved(calls, repeat, min_round_s) if timed and calls else {}
    return Comparison(label, rounds, errors, untimed)


@dataclass
class Peers:
    """The peers' calls for one set of inputs (name -> call) and the peers left out with the reason."""

    calls: dict[str, Call] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


ONNXRUNTIME, OPENVINO, PYTORCH = "onnxruntime", "openvino", "pytorch"


def peer_calls(inputs: Sequence[np.ndarray], threads: int, onnx_bytes: bytes | None = None,
               torch_module: Any = None, torch_inputs: Sequence[Any] | None = None,
               names: Sequence[str] = (ONNXRUNTIME, OPENVINO, PYTORCH)) -> Peers:
    """ONNX Runtime and OpenVINO on the ONNX file's bytes (fed ``inputs`` by the graph's input names), PyTorch
    eager on ``torch_module(*torch_inputs)`` under ``no_grad``; each at its defaults but ``threads``. Only the
    ``names`` asked for; one that cannot be made is in ``missing`` with the reason."""
    from autosched.deploy.reference import onnxruntime_session, openvino_session

    peers = Peers()
    for name in names:
        try:
            if name == ONNXRUNTIME and onnx_bytes is not None:
                session = onnxruntime_session(onnx_bytes, threads)
                feed = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}
                peers.calls[name] = lambda session=session, feed=feed: session.run(None, feed)
            elif name == OPENVINO and onnx_bytes is not None:
                run = openvino_session(onnx_bytes, threads)
                names_in = [i.name for i in onnxruntime_session(onnx_bytes, 1).get_inputs()]
                feed = dict(zip(names_in, inputs, strict=True))
                peers.calls[name] = lambda run=run, feed=feed: run(feed)
            elif name == PYTORCH and torch_module is not None:
                peers.calls[name] = _torch_call(torch_module, list(torch_inputs or []), threads)
            elif name not in (ONNXRUNTIME, OPENVINO, PYTORCH):
                raise UserInputError(f"peer_calls: unknown peer {name!r}: name {ONNXRUNTIME}, {OPENVINO} or {PYTORCH}")
            else:
                peers.missing[name] = "no ONNX model" if name != PYTORCH else "no PyTorch module"
        except UserInputError as err:
            if "unknown peer" in str(err):
                raise
            peers.missing[name] = str(err)
        except Exception as err:  # the peer's own failure to load the model
            peers.missing[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    return peers


def _torch_call(module: Any, inputs: list[Any], threads: int) -> Call:
    import torch

    torch.set_num_threads(threads)

    def call() -> Any:
        with torch.no_grad():
            return module(*inputs)

    return call
