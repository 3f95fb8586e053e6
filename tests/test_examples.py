"""Every example runs, with a tiny budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {  # script -> (tiny-budget arguments, what its output must say)
    "single_operator/tune_matmul.py": (["--size", "32", "--trials", "4"], "matches numpy"),
    "onnx_model/tune_onnx.py": (["--model", "tiny_cnn", "--trials", "3"], "matches ONNX Runtime"),
    "pytorch_model/tune_pytorch.py": (["--model", "tiny_mlp", "--trials", "3"], "matches PyTorch"),
    "relax_module/tune_relax.py": (["--batch", "2", "--trials", "3"], "matches numpy"),
    # one per model family: a small model, one trial per task at most, a few seconds of tuning
    **{f"{family}/tune_{family}.py": (["--small", "--trials", "1", "--time", "5s"], "outputs match")
       for family in ("mlp", "resnet", "mobilenet", "bert", "gpt", "vit", "lstm")},
}


SMOKE = "mlp/tune_mlp.py"  # the one example run in the README's test command; the others are CI's long step


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(s, marks=() if s == SMOKE else pytest.mark.long)
                                    for s in sorted(EXAMPLES)])
def test_example_runs(script, tmp_path):
    extra, expected = EXAMPLES[script]
    if "pytorch" in script or "onnx" in script:
        pytest.importorskip("torch")
    args = [sys.executable, str(ROOT / "examples" / script), *extra, "--db", str(tmp_path / "ex.db")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout
    if "gpt" in script:
        assert "generated" in proc.stdout and "each PyTorch's choice" in proc.stdout


def test_every_example_is_tested():
    found = {str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.py")}
    assert found == set(EXAMPLES)


FAMILIES = ("mlp", "resnet", "mobilenet", "bert", "gpt", "vit", "lstm")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_ships_a_tuning_log_with_its_target_tvm_and_threads(family):
    import json

    from autosched.db import open_database
    from autosched.family_example import load_example

    example, _ = load_example(family)
    assert example.name == family and example.shipped_log.exists(), "tune it, then autosched export"
    db = open_database(str(example.shipped_log), create=False)
    targets = [json.loads(t.target) for t in db.tasks()]
    assert targets and all(t["kind"] == "llvm" and t["mcpu"] and t["num-cores"] >= 1 for t in targets)
    records = db.records()
    assert len(records) >= 5 * len(targets) and all(r.tvm_version for r in records)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_shipped_log_holds_every_task_of_its_example(family):
    """The log is of the model the example builds today: every task extracted from it has its records there
    (a change to the graph path or the task key that left a log stale fails here)."""
    import json

    from autosched._tvm import Target
    from autosched.db import open_database
    from autosched.family_example import load_example, prepare
    from autosched.graph.passes import extract_tasks, rewrite
    from autosched.spaces.settings import settings_for

    pytest.importorskip("torch")
    example, _ = load_example(family)
    db = open_database(str(example.shipped_log), create=False)
    model = prepare(example, small=False).model
    logged = {t.task_key for t in db.tasks() if db.n_measured(t.task_key)}
    for tuned_for in {t.target for t in db.tasks()}:  # each CPU it was tuned on, whatever CPU runs this test
        target = Target(json.loads(tuned_for))
        keys = {t.key for t in extract_tasks(rewrite(model.mod, target), target, settings_for(target).version)}
        assert keys <= logged, f"{len(keys - logged)} of {len(keys)} tasks of {tuned_for} are not in the log"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_ships_records_of_the_avx2_baseline_too(family):
    """Tuned on an x86-64-v3 target (AVX2 + FMA: any x86-64 CPU of the last ten years runs its code) beside the CPU
    it was tuned on first, so every x86 user gets tuned kernels from ``--time 0`` (each timed at compile time)."""
    from autosched.db import open_database
    from autosched.family_example import load_example

    example, _ = load_example(family)
    db = open_database(str(example.shipped_log), create=False)
    baseline = [t for t in db.tasks() if json.loads(t.target).get("mcpu") == "x86-64-v3"]
    assert baseline and sum(db.n_measured(t.task_key) for t in baseline) >= 2 * len(baseline)
