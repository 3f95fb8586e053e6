"""The command line: bad input gives one line and exit code 2 with the database untouched; a real tiny run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from autosched.cli import main
from autosched.db import open_database


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture()
def existing_db(tmp_path):
    path = tmp_path / "kept.db"
    open_database(str(path)).close()
    return path


BAD_TUNE = [
    (["--op", "matmull", "--shape", "8,8,8"], "unknown operator 'matmull'"),
    (["--op", "matmul", "--shape", "8,x,8"], "malformed shape"),
    (["--op", "matmul", "--shape", "8,8"], "matmul takes a shape M,N,K"),
    (["--op", "matmul", "--shape", "8,8,8", "--target", "tpu9000"], "unknown target 'tpu9000'"),
    (["--op", "matmul", "--shape", "8,8,8", "--sampler", "annealing"], "unknown sampler 'annealing'"),
    (["--op", "matmul", "--shape", "8,8,8", "--trials", "0"], "--trials must be at least 1"),
    (["--shape", "8,8,8"], "nothing to tune: give a MODEL"),
    (["m.onnx", "--op", "matmul"], "give either a MODEL or --op"),
]


@pytest.mark.parametrize("args,message", BAD_TUNE)
def test_bad_tune_input_is_one_line_exit_2_and_db_untouched(args, message, existing_db, capsys):
    before = _digest(existing_db)
    assert main(["tune", *args, "--db", str(existing_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("autosched: error:")
    assert _digest(existing_db) == before


def test_bad_input_does_not_create_a_database(tmp_path, capsys):
    path = tmp_path / "new.db"
    assert main(["tune", "--op", "nope", "--shape", "8", "--db", str(path)]) == 2
    assert not path.exists()


def test_a_file_that_is_not_a_database_is_refused_and_untouched(tmp_path, capsys):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07garbage" * 10)
    before = _digest(path)
    for cmd in (["tune", "--op", "matmul", "--shape", "8,8,8"], ["show"], ["export", "-o", str(tmp_path / "o")]):
        assert main([*cmd, "--db", str(path)]) == 2
        assert "not an autosched database" in capsys.readouterr().err
    assert _digest(path) == before


def test_unwritable_database_path(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--db", str(blocker / "x.db")]) == 2
    assert "pick another --db path" in capsys.readouterr().err


def test_show_missing_database(tmp_path, capsys):
    assert main(["show", "--db", str(tmp_path / "nope.db")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nope.db").exists()


def test_import_of_garbage_leaves_the_database_untouched(tmp_path, existing_db, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json at all\n")
    before = _digest(existing_db)
    assert main(["import", str(bad), "--db", str(existing_db)]) == 2
    assert "not an autosched export" in capsys.readouterr().err
    assert _digest(existing_db) == before


def test_console_script_exit_code():
    proc = subprocess.run([sys.executable, "-m", "autosched.cli", "tune", "--op", "nope", "--shape", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown operator 'nope'" in proc.stderr


@pytest.mark.slow
def test_tune_show_export_import_end_to_end(tmp_path, capsys):
    db = tmp_path / "logs" / "mm.db"
    args = ["tune", "--op", "matmul", "--shape", "32,32,32", "--trials", "6", "--batch", "3", "--threads", "1",
            "--db", str(db), "--seed", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "matmul_32x32x32" in out and "GFLOPS" in out
    assert main([*args[:-4], "--trials", "8", "--db", str(db), "--no-baseline"]) == 0  # resumes: 2 more
    assert "resuming matmul_32x32x32: 6 of 8" in capsys.readouterr().err
    d = open_database(str(db))
    assert d.n_measured(d.tasks()[0].task_key) == 8
    assert main(["show", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "matmul_32x32x32" in shown and "llvm" in shown
    assert main(["export", "--db", str(db), "-o", str(tmp_path / "x.jsonl")]) == 0
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["format"] == "autosched-export" and len(lines) >= 1 + 1 + 8
    assert main(["import", str(tmp_path / "x.jsonl"), "--db", str(tmp_path / "copy.db")]) == 0
    copy = open_database(str(tmp_path / "copy.db"))
    key = copy.tasks()[0].task_key
    assert copy.best(key).latency_s == d.best(key).latency_s
    assert os.path.getsize(db) > 0


def test_train_cost_model_from_a_database(tmp_path, capsys):
    import shutil

    from autosched.cost import XGBCostModel

    src = tmp_path / "v1.db"
    shutil.copy(os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "db_v1.db"), src)
    out = tmp_path / "model"
    assert main(["train-cost-model", "--db", str(src), "-o", str(out), "--rounds", "5"]) == 0
    assert "trained on 4 candidates of 1 tasks" in capsys.readouterr().out
    model = XGBCostModel.load(out, "llvm")
    assert model.meta_["command"] == f"autosched train-cost-model --db {src} -o {out} --rounds 5"
    assert model.meta_["trained_on"]["tasks"] == ["matmul_16x16x16"]


def test_a_bad_transfer_model_is_refused_before_the_database_opens(tmp_path, capsys):
    path = tmp_path / "new.db"
    args = ["tune", "--op", "matmul", "--shape", "8,8,8", "--transfer-model", str(tmp_path / "nope"), "--db", str(path)]
    assert main(args) == 2
    assert "not a saved autosched cost model" in capsys.readouterr().err and not path.exists()


def test_config_file_with_an_unknown_cost_model_is_refused(tmp_path, existing_db, capsys):
    cfg = tmp_path / "tune.toml"
    cfg.write_text('[tune]\ncost_model = "oracle"\n')
    before = _digest(existing_db)
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--config", str(cfg), "--db", str(existing_db)]) == 2
    assert "unknown cost model 'oracle'" in capsys.readouterr().err
    assert _digest(existing_db) == before


# --- your own tensor program: tune --func path.py:name -------------------------------------------------------
PROGRAMS = '''
from tvm import te


def matmul():
    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    return [a, b, te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")]


n = te.var("n")
x = te.placeholder((n,), name="x")
dynamic = [x, te.compute((n,), lambda i: x[i] * 2, name="y")]
'''


@pytest.fixture()
def programs_py(tmp_path):
    path = tmp_path / "programs.py"
    path.write_text(PROGRAMS)
    return path


BAD_FUNC = [
    (["--func", "{dir}/nope.py:matmul"], "is not a file"),
    (["--func", "{file}:missing"], "has no attribute 'missing'; programs found there: dynamic"),
    (["--func", "{file}:dynamic"], "dynamic shape: argument x has symbolic dimension(s) n"),
    (["--func", "{file}"], "write PATH.py:NAME"),
    (["--func", "{file}:matmul", "--shape", "8,8"], "--shape goes with --op"),
    (["--func", "{file}:matmul", "--op", "matmul"], "give either a MODEL or --op or --func, not --op and --func"),
    (["--func", "{file}:matmul", "--target", "cuda"], "needs a cuda device, and this machine has none"),
    (["--func", "{file}:matmul", "--target", "aarch64"], "cannot run code for aarch64-linux-gnu"),
]


@pytest.mark.parametrize("args,message", BAD_FUNC)
def test_bad_func_is_one_line_exit_2_and_db_untouched(args, message, programs_py, existing_db, capsys):
    before = _digest(existing_db)
    args = [a.format(dir=programs_py.parent, file=programs_py) for a in args]
    assert main(["tune", *args, "--db", str(existing_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("autosched: error:")
    assert _digest(existing_db) == before


@pytest.mark.slow
def test_tune_func_then_show_and_compile_the_stored_result(programs_py, tmp_path, capsys):
    import numpy as np

    import autosched
    from autosched.programs import load_program

    db = tmp_path / "prog.db"
    args = ["tune", "--func", f"{programs_py}:matmul", "--trials", "4", "--batch", "4", "--threads", "1",
            "--db", str(db)]
    assert main(args) == 0
    assert "matmul" in capsys.readouterr().out
    assert main(["show", "--db", str(db)]) == 0
    assert "matmul" in capsys.readouterr().out
    program, _ = load_program(f"{programs_py}:matmul")
    target = autosched.make_target("llvm", 1)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((16, 16)).astype("float32") for _ in range(2))
    results = []
    for source in (str(db), None):  # tuned, then the unscheduled build
        kernel, dev = autosched.compile_program(program, source, target), autosched._tvm.cpu_device()
        out = autosched._tvm.tvm.runtime.empty((16, 16), "float32", dev)
        kernel["main"](autosched._tvm.tvm.runtime.tensor(a, dev), autosched._tvm.tvm.runtime.tensor(b, dev), out)
        results.append(out.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(results[0], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_tune_func_with_a_relax_module_tunes_it_as_a_model(tmp_path, capsys):
    path = tmp_path / "relax_prog.py"
    path.write_text('''
from tvm.relax.frontend import nn


class Tiny(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return nn.relu(self.fc(x))


def tiny():
    import numpy as np
    import tvm
    from tvm import relax

    mod, params = Tiny().export_tvm(spec={"forward": {"x": nn.spec.Tensor((2, 8), "float32")}})
    rng = np.random.default_rng(0)
    weights = {k: tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.shape]).astype("float32"))
               for k, p in params}
    return relax.transform.BindParams("forward", weights)(mod)
''')
    db = tmp_path / "relax.db"
    assert main(["tune", "--func", f"{path}:tiny", "--trials", "4", "--batch", "4", "--threads", "1",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "autosched tune: tiny" in out and "distinct tasks" in out
    flat = " ".join(out.split())  # GB/s beside GFLOPS, against this machine's copy bandwidth
    assert "GB/s" in out and re.search(r"copy bandwidth at these threads, [\d.]+ GB/s", flat), out


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_tune_quiet_prints_one_line_and_json_prints_progress_and_a_result(flag, tmp_path, capsys):
    import json

    db = tmp_path / "q.db"
    argv = ["tune", "--op", "matmul", "--shape", "16,16,16", "--trials", "3", "--threads", "1", "--batch", "2",
            "--cost-model", "none", "--db", str(db), flag]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "━" not in err and "┃" not in out  # no bar, no table
    lines = out.strip().splitlines()
    if flag == "--quiet":
        assert len(lines) == 1 and "best" in lines[0] and str(db) in lines[0]
        return
    events = [json.loads(line) for line in lines]
    assert {e["event"] for e in events[:-1]} == {"progress"} and events[-1]["event"] == "result"
    assert events[-1]["trials"] == 3 and events[-1]["best_latency_s"] > 0
    assert [e["completed"] for e in events[:-1]] == sorted(e["completed"] for e in events[:-1])


def test_tune_a_model_with_json_ends_with_its_result(tmp_path, capsys):
    import json

    pytest.importorskip("torch")
    argv = ["tune", "zoo:tiny_mlp", "--trials", "1", "--threads", "1", "--cost-model", "none",
            "--db", str(tmp_path / "m.db"), "--json"]
    assert main(argv) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert events[-1]["event"] == "result" and events[-1]["tasks"] >= 1 and events[-1]["estimated_s"] > 0
    steps = [e["step"] for e in events if e["event"] == "step"]  # the long steps before tuning, each timed
    assert steps == ["importing zoo:tiny_mlp", "tiny_mlp: graph rewrites", "tiny_mlp: task extraction"], steps
    assert all(e["elapsed_s"] >= 0 for e in events if e["event"] == "step")


def test_quiet_and_json_together_are_refused(capsys):
    assert main(["tune", "--op", "matmul", "--shape", "16,16,16", "--quiet", "--json"]) == 2


def test_show_counts_trials_per_design_and_stars_the_best_records_design():
    from autosched.cli.database import _designs
    from autosched.records import Status, TuningRecord

    def rec(design, latency, status=Status.OK):
        return TuningRecord("k", "{}", {} if design is None else {"design": design, "tile": 4}, [], None, status,
                            [latency], None, "v", "tvm", 1)

    recs = [rec(0, 2e-3), rec(1, 1e-3), rec(1, 3e-3), rec(1, 0, Status.INVALID), rec(2, 0, Status.BUILD_ERROR)]
    assert _designs(recs, recs[1]) == "0:1 1:2* 2:1"  # a rejected candidate is not a trial; a failed one is
    assert _designs(recs, None) == "0:1 1:2 2:1"
    assert _designs([*recs, rec(None, 5e-3)], recs[0]) == "0:1* 1:2 2:1 default:1"  # the untuned baseline
    assert _designs([rec(None, 1e-3)], None) == "-"  # a space with one design


@pytest.mark.slow
def test_tune_and_show_name_a_database_url_without_its_password(postgres_url, capsys):
    """Every line that names the database (tune's table and summary, show's title) hides the URL's password."""
    import sqlalchemy as sa

    password = sa.make_url(postgres_url).password
    assert password, "the test database's URL has a password"
    argv = ["tune", "--op", "matmul", "--shape", "8,8,8", "--trials", "2", "--batch", "2", "--threads", "1",
            "--no-transfer", "--db", postgres_url]
    assert main(argv) == 0
    assert main(argv) == 0  # resuming: its line names the database too
    assert main(["tune", *argv[1:], "--json"]) == 0
    assert main(["show", "--db", postgres_url]) == 0
    printed = capsys.readouterr()
    assert "***@" in printed.out and f":{password}@" not in printed.out + printed.err
