"""aarch64 end to end on the emulated device (``.ci/arm_device``): an operator tuned for ``--target aarch64`` with
every candidate measured and checked there over TVM RPC, a wrong candidate caught there, and models compiled for
aarch64 (CNN, transformer encoder, decoder), loaded by the device's TVM runtime and run, their outputs checked
against ONNX Runtime here. Emulated timings mean nothing; correctness and the path do."""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from autosched import api
from autosched._tvm import IRModule, save_json, te, tirx
from autosched.cli import main
from autosched.config import TuneConfig
from autosched.db import MemoryDatabase, open_database
from autosched.records import Candidate, Status
from autosched.session import TuningSession
from autosched.targets import make_target
from autosched.testing.fakes import ListStrategy
from autosched.tune import tune_task

pytestmark = [pytest.mark.arm, pytest.mark.slow]
RUN_ARTIFACT = str(Path(__file__).with_name("run_artifact.py"))
N = 16  # the matmul's size: tiny, the device is emulated


def _statuses(db: Path) -> Counter:
    database = open_database(str(db))
    try:
        return Counter(r.status for r in database.records())
    finally:
        database.close()


def test_an_operator_tuned_for_aarch64_is_measured_and_checked_on_the_device(arm_rpc, tmp_path):
    address, key = arm_rpc
    db = tmp_path / "arm.db"
    args = [
        "tune",
        "--op",
        "matmul",
        "--shape",
        f"{N},{N},{N}",
        "--target",
        "aarch64",
        "--threads",
        "1",
        "--trials",
        "4",
        "--batch",
        "2",
        "--cost-model",
        "none",
        "--seed",
        "0",
        "--no-baseline",
        "--quiet",
        "--db",
        str(db),
        "--rpc",
        address,
        "--key",
        key,
    ]
    assert main(args) == 0
    assert _statuses(db) == Counter({Status.OK: 4})  # each one ran there and matched NumPy's matmul
    database = open_database(str(db))
    try:
        (task,) = database.tasks()
        assert '"mtriple": "aarch64-linux-gnu"' in task.target
    finally:
        database.close()


def _matmul_plus(extra=None) -> IRModule:
    """The matmul task's signature; ``extra`` added to the output element (0, 0) (a wrong result)."""
    a, b = te.placeholder((N, N), "float32", name="A"), te.placeholder((N, N), "float32", name="B")
    k = te.reduce_axis((0, N), name="k")
    c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    if extra is None:
        return IRModule({"main": te.create_prim_func([a, b, c])})
    d = te.compute((N, N), lambda i, j: c[i, j] + te.if_then_else(tirx.all(i == 0, j == 0), extra, 0.0), name="D")
    return IRModule({"main": te.create_prim_func([a, b, d])})


def test_a_wrong_candidate_is_caught_on_the_device(arm_rpc):
    address, key = arm_rpc
    task = api.operator_task("matmul", (N, N, N), make_target("aarch64", 1))
    mods = {"good": _matmul_plus(), "wrong": _matmul_plus(tirx.const(1.0, "float32"))}
    cands = [
        Candidate(task.key, {"kind": k}, decisions=[i], mod_json=save_json(mods[k]))
        for i, k in enumerate(["good", "wrong"])
    ]
    cfg = TuneConfig(
        n_threads=1, run_timeout_s=120, build_timeout_s=120, repeat=1, min_repeat_ms=1, rpc=address, rpc_key=key
    )
    db = MemoryDatabase()
    with TuningSession(cfg, task.target_json) as session:
        tune_task(
            task,
            ListStrategy(cands),
            session.builder,
            session.runner,
            db,
            session.prepare_io(task),
            n_trials=2,
            batch_size=2,
        )
    records = db.records()
    assert [r.status for r in records] == [Status.OK, Status.WRONG_RESULT], [(r.status, r.error) for r in records]
    assert "differs" in records[1].error


# --- models: compiled here for aarch64, run there -------------------------------------------------------------
def _onnx(model: str, folder: Path) -> Path:
    """The model as ONNX: a zoo model, or a corpus model at its small size."""
    path = folder / f"{model}.onnx"
    if model.startswith("zoo:"):
        from autosched.corpus import zoo

        return zoo.export_onnx(model.removeprefix("zoo:"), path)
    from autosched.corpus import catalog

    return catalog.export_onnx(model, path)


def _inputs(artifact: Path) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    meta = json.loads(zipfile.ZipFile(artifact).read("model.so.json"))
    made = []
    for name, shape, dtype in meta["inputs"]:
        if dtype.startswith("float"):
            made.append((name, rng.standard_normal(shape).astype(dtype)))
        else:  # token ids (below the small vocabularies), masks all ones
            made.append((name, np.ones(shape, dtype) if "mask" in name else rng.integers(0, 100, shape).astype(dtype)))
    return made


def _compile_and_run_there(arm_device, model: str, db: Path, folder: Path) -> dict:
    """``model`` compiled for aarch64 with ``db``'s schedules (default ones elsewhere), run on the device by TVM's
    runtime alone, its outputs checked against ONNX Runtime's here; returns the library's metadata."""
    onnx_path = _onnx(model, folder)
    artifact = folder / "model.autosched"
    args = ["compile", str(onnx_path), "--target", "aarch64", "--threads", "1", "--db", str(db), "-o", str(artifact)]
    assert main(args) == 0
    manifest = json.loads(zipfile.ZipFile(artifact).read("manifest.json"))
    assert "aarch64-linux-gnu" in json.dumps(manifest["target"])
    inputs = _inputs(artifact)
    np.savez(folder / "in.npz", **{f"in{i}": x for i, (_, x) in enumerate(inputs)})
    arm_device.python(RUN_ARTIFACT, str(artifact), str(folder / "in.npz"), str(folder / "out.npz"))
    want = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, dict(inputs))
    with np.load(folder / "out.npz") as got:
        assert str(got["machine"]) == "aarch64"
        assert len(got.files) - 1 == len(want)
        for i, w in enumerate(want):
            scale = max(float(np.max(np.abs(w))), 1e-6)
            err = float(np.max(np.abs(got[f"out{i}"] - w))) / scale
            print(f"{model} out{i}: max error {err:.2e} (relative to max |output| {scale:.3g})")
            assert err < 1e-4, (model, i, err)
    return json.loads(zipfile.ZipFile(artifact).read("model.so.json"))


@pytest.mark.parametrize("model", ["zoo:tiny_cnn", "distilbert", "gpt2"])  # CNN, transformer encoder, decoder
def test_a_model_compiled_for_aarch64_runs_on_the_device(arm_device, model, tmp_path):
    open_database(str(tmp_path / "empty.db")).close()  # no records: default schedules everywhere
    meta = _compile_and_run_there(arm_device, model, tmp_path / "empty.db", tmp_path)
    assert set(meta["sources"].values()) == {"default"}


def test_a_model_tuned_on_the_device_compiles_and_runs_there(arm_rpc, arm_device, tmp_path):
    """tune -> compile -> artifact -> load -> run: every candidate of every task measured and checked there."""
    address, key = arm_rpc
    db = tmp_path / "tuned.db"
    tune = [
        "tune",
        "zoo:tiny_cnn",
        "--target",
        "aarch64",
        "--threads",
        "1",
        "--trials",
        "6",
        "--seed",
        "0",
        "--quiet",
        "--db",
        str(db),
        "--rpc",
        address,
        "--key",
        key,
    ]
    assert main(tune) == 0
    statuses = _statuses(db)
    assert statuses[Status.OK] >= 6 and set(statuses) == {Status.OK}, statuses
    meta = _compile_and_run_there(arm_device, "zoo:tiny_cnn", db, tmp_path)
    assert "tuned" in meta["sources"].values(), meta["sources"]
