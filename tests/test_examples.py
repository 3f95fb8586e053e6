"""Every example runs, with a tiny budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "single_operator/tune_matmul.py": ["--size", "32", "--trials", "4"],
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs(script, tmp_path):
    args = [sys.executable, str(ROOT / "examples" / script), *EXAMPLES[script], "--db", str(tmp_path / "ex.db")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "matches numpy" in proc.stdout


def test_every_example_is_tested():
    found = {str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.py")}
    assert found == set(EXAMPLES)
