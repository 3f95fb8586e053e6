"""The package's layout: its import graph has no cycle and no arrow up a layer (bench/module_map.py draws it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def module_map():
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "bench" / "module_map.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_import_graph_has_no_cycle(module_map):
    found = module_map.module_map()
    assert len(found.lines) > 50  # the whole package was read
    assert found.cycles() == []
    assert found.group_cycles() == []


def test_every_import_goes_down_the_layers(module_map):
    found = module_map.module_map()
    assert {module_map.group(m) for m in found.lines} <= set().union(*module_map.LAYERS), "a new group needs a layer"
    assert found.upward() == []


def test_the_checker_sees_lazy_imports_cycles_and_upward_arrows(module_map, tmp_path):
    package = tmp_path / "autosched"
    (package / "cli").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli" / "__init__.py").write_text("")
    (package / "errors.py").write_text("def f():\n    from autosched.cli import main\n")  # lazy, and upward
    (package / "cli" / "main.py").write_text("from autosched import errors\n")
    (package / "typing_only.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                            "    from autosched.cli import main\n")
    found = module_map.module_map(package)
    assert found.imports["autosched.errors"] == {"autosched.cli.main"}
    assert found.cycles() == [["autosched.cli.main", "autosched.errors"]]
    assert ("autosched.errors", "autosched.cli.main") in found.upward()
    assert "autosched.typing_only" not in found.imports  # type hints only: not a dependency


def test_the_cli_command_modules_never_import_each_other(module_map):
    found = module_map.module_map()
    commands = {"autosched.cli.operator", "autosched.cli.model", "autosched.cli.database", "autosched.cli.doctor"}
    for module in commands:
        assert not found.imports[module] & commands, module
