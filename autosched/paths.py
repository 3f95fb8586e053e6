"""Where the shipped data folders (search_spaces/, cost_models/, tuning_logs/) live.

In a source checkout or an editable install they are the top-level folders of the repository; a wheel
carries copies under ``autosched/_data/`` (see pyproject's force-include).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"autosched data folder {name!r} is missing; reinstall autosched")
