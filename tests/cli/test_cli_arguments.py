"""A malformed value for any typed option, of any ``autosched`` command or example script, is one line on stderr
and exit code 2, never a traceback; the examples' ``--time 0`` means no tuning (issue 51).

Only argument parsing runs here: no model is loaded, built or tuned."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autosched import family_example
from autosched.cli import build_parser, main
from autosched.errors import UserInputError
from autosched.family_example import example_parser, parse_args

ROOT = Path(__file__).resolve().parents[2]
# values that break parsers: words, a sign with a unit, nothing, two dots, the float specials, a huge count
CANDIDATES = ("not-a-number", "abc", "-5x", "", " ", "1.5.5", "10x", "nan", "inf", "-1", "1e400", "0x10")
TYPE_FAILURES = (argparse.ArgumentTypeError, ValueError, TypeError, UserInputError)


def _rejected(action: argparse.Action) -> list[str]:
    """The candidates this option's type really refuses (``float`` takes "nan", ``int`` takes "-1", ...)."""
    bad = []
    for value in CANDIDATES:
        try:
            action.type(value)
        except TYPE_FAILURES:
            bad.append(value)
    return bad


def _typed(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The optional arguments of one parser that convert their value (not plain strings)."""
    for action in parser._actions:
        if action.option_strings and action.type is not None and action.type is not str:
            yield action


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    seen = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser
                    seen.add(id(sub))
                    yield name, sub


def _required(parser: argparse.ArgumentParser) -> list[str]:
    """Dummy values for what the command requires, so that the only error left is the malformed option."""
    argv = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if not action.option_strings and action.nargs in (None, 1, "+"):
            argv.append("dummy")
        elif action.option_strings and action.required:
            argv += [action.option_strings[-1], "dummy"]
    return argv


def _flag(action: argparse.Action, value: str) -> str:
    """``--opt=value`` (one word, so that "-5x" or "" is taken as the value, not as another flag)."""
    long = [s for s in action.option_strings if s.startswith("--")]
    return f"{long[0]}={value}" if long else f"{action.option_strings[0]}{value}"


def _cli_cases() -> list[tuple[list[str], argparse.Action, list[str]]]:
    """(argv before the malformed option, the option, argv after it) for every typed option of every command and
    of the top-level parser; discovered from the parser, so a new option is covered without editing this."""
    parser = build_parser()
    commands = list(_subcommands(parser))
    first, first_parser = commands[0]  # a top-level option is followed by a command (and what it requires)
    cases = [([], a, [first, *_required(first_parser)]) for a in _typed(parser)]
    for name, sub in commands:
        cases += [([name, *_required(sub)], a, []) for a in _typed(sub)]
    return cases


CLI_CASES = _cli_cases()


def _case_id(case: tuple[list[str], argparse.Action, list[str]]) -> str:
    before, action, _ = case
    return f"{before[0] if before else 'autosched'}{action.option_strings[-1]}"


def _one_line(err: str, prefix: str, action: argparse.Action) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"not one line: {err!r}"
    assert lines[0].startswith(prefix), lines[0]
    assert any(opt in lines[0] for opt in action.option_strings), f"the option is not named: {lines[0]}"
    assert "Traceback" not in err
    return lines[0]


def test_the_walk_finds_the_typed_options_of_every_command():
    found = {_case_id(case) for case in CLI_CASES}
    assert {"tune--time", "tune--trials", "tune--seed", "tune--threads", "tune--batch", "run--repeat",
            "run--tolerance", "run--profile", "compile--max-padding", "inspect--threads",
            "train-cost-model--rounds"} <= found, found


@pytest.mark.parametrize("case", CLI_CASES, ids=_case_id)
def test_a_malformed_value_of_any_cli_option_is_one_line_and_exit_2(case, capsys):
    before, action, after = case
    bad = _rejected(action)
    assert bad, f"no candidate value is invalid for {action.option_strings} (type {action.type!r}): add one"
    for value in bad:
        argv = [*before, _flag(action, value), *after]
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        _one_line(err, "autosched: error:", action)
        assert out == ""


@pytest.mark.parametrize("text", ["0", "0s", "0m", "-5", "garbage"])
def test_tune_still_refuses_a_zero_or_malformed_time(text, capsys):
    assert main(["tune", "dummy.onnx", f"--time={text}"]) == 2
    assert capsys.readouterr().err.startswith("autosched: error: --time")


# --- the example scripts ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["0", "0s", "0m", "0.0", "0h"])
def test_time_0_in_an_example_means_no_tuning(text):
    args = parse_args("resnet", ["--time", text])
    assert args.time == 0 and args.trials == 0  # _run tunes only where one of them is set


@pytest.mark.parametrize("text,seconds", [("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("45", 45.0)])
def test_an_example_time_is_seconds_minutes_or_hours(text, seconds):
    assert parse_args("mlp", ["--time", text]).time == seconds
    assert parse_args("mlp", []).time == 180.0


def _assert_exit_2_one_line(parse, action: argparse.Action, value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse([_flag(action, value)])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    line = _one_line(err, "", action)
    assert ": error: argument " in line and out == ""


def test_a_malformed_example_time_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args("resnet", ["--time", "garbage"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "error: argument --time: 'garbage'" in err


@pytest.mark.parametrize("action", list(_typed(example_parser("resnet"))), ids=lambda a: a.option_strings[-1])
def test_a_malformed_value_of_any_family_example_option_is_one_line_and_exit_2(action, capsys):
    bad = _rejected(action)
    assert bad and "-1" in bad, bad  # no negative budget, count of trials or threads either
    for value in bad:
        _assert_exit_2_one_line(lambda argv: parse_args("resnet", argv), action, value, capsys)


class _Captured(Exception):
    pass


# the examples with their own parser: their main() is stopped where it parses, and that parser is checked
OWN_PARSERS = ["onnx_model/tune_onnx.py", "pytorch_model/tune_pytorch.py", "relax_module/tune_relax.py",
               "single_operator/tune_matmul.py"]


@pytest.mark.parametrize("script", OWN_PARSERS)
def test_a_malformed_value_of_any_option_of_an_example_with_its_own_parser_is_one_line(script, monkeypatch,
                                                                                      capsys):
    if "pytorch" in script or "onnx" in script:
        pytest.importorskip("torch")
    path = ROOT / "examples" / script
    spec = importlib.util.spec_from_file_location(f"_args_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its imports only: main() is not run on import
    parsers = []

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise _Captured

    monkeypatch.setattr(family_example.ExampleParser, "parse_args", capture)
    with pytest.raises(_Captured):
        module.main()
    (parser,) = parsers  # the script parses with ExampleParser (one line, exit 2), not a plain ArgumentParser
    monkeypatch.undo()
    actions = list(_typed(parser))
    assert actions, f"{script} has no typed option left: drop it from OWN_PARSERS"
    for action in actions:
        bad = _rejected(action)
        assert bad, action.option_strings
        for value in bad:
            _assert_exit_2_one_line(parser.parse_args, action, value, capsys)


def test_every_example_with_its_own_parser_is_checked():
    own = {str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.py")
           if "parse_args()" in p.read_text()}
    assert own == set(OWN_PARSERS)


def test_the_resnet_script_itself_prints_one_line_for_a_malformed_time(tmp_path):
    """The user's view, in a subprocess: ``python examples/resnet/tune_resnet.py --time garbage``."""
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "resnet" / "tune_resnet.py"), "--time",
                           "garbage", "--db", str(tmp_path / "never.db")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tune_resnet.py: error: argument --time"), done.stderr
    assert not (tmp_path / "never.db").exists()
