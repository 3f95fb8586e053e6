"""CLI command ``doctor``: this machine as autosched sees it, and which tuning records apply to it
(``autosched.doctor``); tables, or one JSON object with ``--json``."""

from __future__ import annotations

import argparse

from rich.table import Table

from autosched.cli.output import emit, out
from autosched.db import display_name


def cmd_doctor(args: argparse.Namespace) -> int:
    from autosched.doctor import TIMED_MEANS, diagnose

    report = diagnose(args.db, display_name(args.db) if args.db else None)
    if args.json:
        emit(report)
        return 0
    _print_machine(report)
    logs = report.get("shipped_logs", [])
    _print_logs("shipped tuning logs (tuning_logs/)", logs)
    out.print(f"{sum(log['usable'] > 0 for log in logs)} of {len(logs)} shipped logs have records for this machine "
              "(applied as they are, or timed against the default schedules when compiling)", highlight=False)
    out.print(TIMED_MEANS, style="dim", highlight=False)
    if "database" in report:
        db = report["database"]
        _print_logs(f"database {db['name']}", [db])
        timed = db["usable"] - db["applying"]
        out.print(f"{db['name']}: {db['applying']} of {db['n_records']} records apply here, {timed} more are timed "
                  "here when compiling", highlight=False)
    return 0


def _print_machine(report: dict) -> None:
    cpu = report["cpu"]
    table = Table(title="autosched doctor: this machine", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("found", overflow="fold")
    table.add_row("CPU", f"{cpu['vendor']}, {cpu['model']} ({cpu['cores']} cores; LLVM: {cpu['llvm_cpu']})")
    table.add_row("vector width", f"{cpu['vector_bits']} bits")
    flags = cpu["flags"]
    table.add_row("extensions", ", ".join(f"{name} {'yes' if on else 'no'}" for name, on in flags.items())
                  if flags else "unknown (LLVM cannot read this CPU's features)")
    table.add_row("LLVM target (--target llvm)", report["target"]["llvm"])
    table.add_row("threads (default --threads)", str(report["threads"]))
    for name, version in report["versions"].items():
        table.add_row(name, version)
    table.add_row("GPU", "; ".join(report["gpus"]) or "none (no nvidia-smi, or no GPU)")
    nvcc = report["nvcc"]
    table.add_row("nvcc", f"{nvcc['path']} ({nvcc['version']})" if nvcc else "not on PATH")
    out.print(table)


def _print_logs(title: str, logs: list[dict]) -> None:
    """One row per log: its records, how many apply here or are timed here, why the rest do not."""
    from autosched.doctor import APPLIES, TIMED

    table = Table(title=f"{title}: which records apply here")
    for col in ("log", "records", "apply here", "timed here", "by target: verdict"):
        table.add_column(col, justify="right" if col in ("records", "apply here", "timed here") else "left")
    for log in logs:
        lines = [f"{n} {_mark(log['kinds'][why], APPLIES, TIMED)} {why}" for why, n in log["reasons"].items()]
        table.add_row(log["name"], str(log["n_records"]), str(log["applying"]), str(log["usable"] - log["applying"]),
                      "\n".join(lines) or "-")
    out.print(table)


def _mark(kind: str, applies: str, timed: str) -> str:
    return {applies: "apply:", timed: "timed:"}.get(kind, "not here:")
