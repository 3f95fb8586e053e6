"""The API and the command line refuse the same bad input with the same line, before any database is opened."""

from __future__ import annotations

import pytest

import autosched
from autosched.cli import main
from autosched.errors import UserInputError


@pytest.mark.parametrize("config, flags", [
    (autosched.TuneConfig(sampler="annealing"), ["--sampler", "annealing"]),
    (autosched.TuneConfig(cost_model="oracle"), None),  # the CLI's --cost-model is a choice: argparse's own line
    (autosched.TuneConfig(n_trials=0), ["--trials", "0"]),
])
def test_a_bad_config_is_the_same_line_from_the_api_and_the_cli(config, flags, tmp_path, capsys):
    db = tmp_path / "x.db"
    with pytest.raises(UserInputError) as refused:
        autosched.tune_operator("matmul", (8, 8, 8), db=str(db), config=config)
    assert not db.exists()
    if flags is None:
        return
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", *flags, "--db", str(db)]) == 2
    line = capsys.readouterr().err.strip().removeprefix("autosched: error: ")
    api_line = str(refused.value)
    assert not db.exists()
    # the same words; the CLI names the flag where the API names the config field
    assert line == api_line.replace("config: n_trials", "--trials")


def test_an_unknown_operator_shape_or_target_is_refused_by_the_api_before_the_database(tmp_path):
    db = tmp_path / "x.db"
    for op, shape, target in (("nope", (8,), "llvm"), ("matmul", (8, 8), "llvm"), ("matmul", (8, 8, 8), "quantum")):
        with pytest.raises(UserInputError):
            autosched.tune_operator(op, shape, target, db=str(db))
    assert not db.exists()


def test_max_padding_needs_shape_buckets_in_the_api_as_on_the_command_line():
    with pytest.raises(UserInputError, match="--max-padding goes with --shape-buckets"):
        autosched.compile("zoo:tiny_mlp", max_padding=1.25)
