"""bench/te_workloads.py keeps each seed's run in --runs-dir and reads it back instead of tuning it again."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest


def _args(tmp_path, seeds: int, **kw) -> SimpleNamespace:
    base = dict(runs_dir=str(tmp_path / "runs"), cpu="testcpu", commit="abc1234", index=0, threads=1, trials=64,
                seeds=seeds)
    return SimpleNamespace(**{**base, **kw})


def test_runs_are_kept_per_cpu_and_seed_and_read_back(load_bench, tmp_path, capsys):
    bench = load_bench("te_workloads")
    made: list[int] = []

    def new_run(seed: int) -> dict:
        made.append(seed)
        return {"seed": seed, "autosched_s": 1e-3 * (seed + 1), "autosched_wall_s": 10.0, "ms_s": 2e-3,
                "ms_wall_s": 20.0}

    first = bench.seed_runs("GMM", _args(tmp_path, seeds=2), new_run, flops=4e6)
    assert made == [0, 1]
    kept = sorted(p.name for p in (tmp_path / "runs" / "testcpu").iterdir())
    assert kept == ["GMM.i0.t1.n64.s0.json", "GMM.i0.t1.n64.s1.json"]
    assert json.loads((tmp_path / "runs" / "testcpu" / kept[1]).read_text())["commit"] == "abc1234"

    again = bench.seed_runs("GMM", _args(tmp_path, seeds=3, commit="def5678"), new_run, flops=4e6)
    assert made == [0, 1, 2]  # only the missing seed was tuned
    assert [r["commit"] for r in again] == ["abc1234", "abc1234", "def5678"]
    assert again[:2] == first
    assert "done earlier (abc1234" in capsys.readouterr().out

    other = bench.seed_runs("GMM", _args(tmp_path, seeds=1, trials=8), new_run, flops=4e6)
    assert made == [0, 1, 2, 0] and other[0]["commit"] == "abc1234"  # another budget is another run


def test_without_runs_dir_nothing_is_kept(load_bench, tmp_path):
    bench = load_bench("te_workloads")
    runs = bench.seed_runs("SFM", _args(tmp_path, seeds=1, runs_dir=None), lambda seed: {"seed": seed}, flops=1.0)
    assert runs[0]["seed"] == 0 and not (tmp_path / "runs").exists()


def test_skip_ms_runs_stay_out_of_the_runs_dir(load_bench, monkeypatch, capsys):
    bench = load_bench("te_workloads")
    monkeypatch.setattr("sys.argv", ["te_workloads.py", "--skip-ms", "--runs-dir", "x"])
    with pytest.raises(SystemExit):
        bench.parse_args()
    assert "keep them out of --runs-dir" in capsys.readouterr().err
