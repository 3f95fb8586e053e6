"""Run on the emulated aarch64 device (``.ci/arm_device python``) with TVM's runtime only (no autosched): load an
artifact's library, run its entry function on the inputs, write the outputs.

Usage: run_artifact.py ARTIFACT INPUTS.npz OUTPUTS.npz   (inputs in0, in1, ...; outputs out0, out1, ...)
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import tvm
from tvm import relax


def run_library(artifact: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory() as folder:
        zipfile.ZipFile(artifact).extractall(folder, ["model.so", "model.so.json"])
        meta = json.loads((Path(folder) / "model.so.json").read_text())
        dev = tvm.cpu(0)
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(Path(folder) / "model.so")), dev)
        out = vm[meta["entry"]](*[tvm.runtime.tensor(x, dev) for x in inputs])
    outs = out if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else [out]
    return [o.numpy() for o in outs]


def main(artifact: str, inputs_path: str, outputs_path: str) -> None:
    with np.load(inputs_path) as data:
        inputs = [data[f"in{i}"] for i in range(len(data.files))]
    outputs = run_library(Path(artifact), inputs)
    np.savez(outputs_path, machine=np.array(platform.machine()), **{f"out{i}": o for i, o in enumerate(outputs)})


if __name__ == "__main__":
    main(*sys.argv[1:])
