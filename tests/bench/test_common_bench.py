"""bench/common.py: what every benchmark writes."""

from __future__ import annotations

from pathlib import Path


def test_a_results_file_holds_no_database_password(load_bench, tmp_path, monkeypatch):
    common = load_bench("common")
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    path = common.write_json("x", {"args": {"db": "postgresql://u:s3cr3t-PLANTED-pw@h/x", "out": Path("a")},
                                   "command": "python bench/x.py --db=postgresql://u:s3cr3t-PLANTED-pw@h/x"})
    text = path.read_text()
    assert "PLANTED" not in text and text.count("postgresql://u:***@h/x") == 2 and '"out": "a"' in text
