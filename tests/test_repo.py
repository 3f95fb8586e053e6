"""Project promises: the README's set-up commands and what CI runs stay in step; data ships in the wheel."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text().split("## Use")[0])


def test_readme_starts_with_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2
    assert "autosched tune" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_commands()[1].replace(" -q -e", " -q -e") in ci


def test_data_folders_ship_inside_the_wheel():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = meta["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert set(include) == {"search_spaces", "cost_models", "tuning_logs"}
    for folder in include:
        assert (ROOT / folder).is_dir()


def test_torch_is_pinned_exactly_and_optional():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("torch") for d in meta["dependencies"])
    assert meta["optional-dependencies"]["torch"] == ["torch==2.13.0"]


def test_pip_wheel_builds_one_wheel_with_the_data_and_the_command(tmp_path):
    """What CI's .ci/wheel_check installs and runs outside the source tree: the data folders are inside the package
    and the ``autosched`` command and the torch.compile backend are declared."""
    import subprocess
    import sys
    import zipfile

    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("autosched-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for folder in ("search_spaces", "cost_models", "tuning_logs"):
        shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*") if p.is_file()}
        assert {f"autosched/_data/{p}" for p in shipped} <= set(names), folder
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "autosched = autosched.cli:main" in entry_points
    assert "[torch_dynamo_backends]" in entry_points  # torch.compile(model, backend="autosched") once installed
    assert "wheel_check" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_the_tests_the_readme_command_leaves_out_as_steps_of_their_own():
    """The README's command leaves out the tests marked ``long`` (tests/conftest.py); CI runs them as a step of its
    own, so none is lost; every marker left out is registered with what it means."""
    import ast

    conftest = (ROOT / "tests" / "conftest.py").read_text()
    DEFAULT_LEFT_OUT = ast.literal_eval(re.search(r"^DEFAULT_LEFT_OUT = (\(.*?\))", conftest, re.M)[1])
    assert "long" in DEFAULT_LEFT_OUT
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest -q -m long" in ci and "--corpus -m corpus" in ci
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert {m.split(":")[0] for m in markers} >= set(DEFAULT_LEFT_OUT)
