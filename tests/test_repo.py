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
