"""The slowest test files of a pytest run, from its JUnit XML (``pytest --junitxml=FILE``).

    python bench/suite_times.py FILE.xml [--top 20]

Prints one row per test file: its total seconds, its number of tests and its slowest test, the slowest first,
then the total of all files (the tests' time, not the run's wall time: collection and fixtures outside tests are
not in it).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict


def file_times(path: str) -> dict[str, tuple[float, int, str, float]]:
    """file -> (total seconds, tests, slowest test's name, its seconds)."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    slowest: dict[str, tuple[str, float]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        # classname is "tests.cli.test_cli" or "tests.cli.test_cli.TestClass": the file is its module part
        parts = case.get("classname", "").split(".")
        while len(parts) > 1 and parts[-1][:1].isupper():
            parts.pop()
        name, seconds = "/".join(parts) + ".py", float(case.get("time", 0))
        totals[name] += seconds
        counts[name] += 1
        if seconds > slowest.get(name, ("", -1.0))[1]:
            slowest[name] = (case.get("name", ""), seconds)
    return {f: (totals[f], counts[f], *slowest[f]) for f in totals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="a pytest --junitxml file")
    parser.add_argument("--top", type=int, default=20, help="how many files to list (default 20)")
    args = parser.parse_args()
    times = file_times(args.junit)
    rows = sorted(times.items(), key=lambda kv: -kv[1][0])
    print(f"{'seconds':>8}  {'tests':>5}  {'file':<48}  slowest test")
    for name, (total, count, test, seconds) in rows[: args.top]:
        print(f"{total:8.1f}  {count:5d}  {name:<48}  {test[:50]} ({seconds:.1f} s)")
    top = sum(t[0] for _, t in rows[: args.top])
    everything = sum(t[0] for t in times.values())
    print(
        f"{top:8.1f}  the {min(args.top, len(rows))} files above; all {len(rows)} files "
        f"({sum(t[1] for t in times.values())} tests): {everything:.1f} s"
    )


if __name__ == "__main__":
    main()
