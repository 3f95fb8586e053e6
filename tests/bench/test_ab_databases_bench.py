"""bench/ab_databases.py refuses a missing file in one line, before loading anything."""

from __future__ import annotations

import pytest


def test_a_missing_database_is_one_line_before_any_work(load_bench, tmp_path, capsys):
    bench = load_bench("ab_databases")
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    with pytest.raises(SystemExit) as info:
        bench.main([str(model), str(tmp_path / "a.db"), str(tmp_path / "b.db")])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"no such file: {tmp_path / 'a.db'}")
