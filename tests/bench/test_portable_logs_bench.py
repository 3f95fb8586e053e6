"""bench/portable_logs.py: the shipped log split by CPU as the columns need it, and its arguments."""

from __future__ import annotations

import json

import pytest

ROOT_LOG = "example_mlp.jsonl.gz"


def test_the_shipped_log_splits_into_its_baseline_and_its_other_cpus(load_bench, tmp_path):
    bench = load_bench("portable_logs")
    from autosched.paths import data_dir

    dbs, cpus = bench._log_databases(data_dir("tuning_logs") / ROOT_LOG, bench.BASELINE, tmp_path)
    mcpus = {name: {json.loads(t.target)["mcpu"] for t in db.tasks()} for name, db in dbs.items()}
    assert mcpus["baseline"] == {bench.BASELINE} and bench.BASELINE not in mcpus["other"]
    assert mcpus["all"] == mcpus["baseline"] | mcpus["other"] and mcpus["other"]
    assert len(dbs["all"].records()) == len(dbs["baseline"].records()) + len(dbs["other"].records())
    assert cpus["baseline"] == bench.BASELINE


def test_an_unknown_family_or_a_bad_budget_is_one_line_and_exit_2(load_bench, capsys):
    bench = load_bench("portable_logs")
    for argv in (["--families", "mlp,nope"], ["--time", "soon"]):
        with pytest.raises(SystemExit) as stop:
            bench.parse_args(argv)
        assert stop.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
    assert bench.parse_args(["--families", "mlp, resnet", "--time", "90s"]).families == ["mlp", "resnet"]
