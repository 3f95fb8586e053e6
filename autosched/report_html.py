"""The tuning report as one self-contained HTML file: the numbers of a :class:`autosched.report.Report`, with
matplotlib plots embedded as SVG data URIs (nothing is loaded from anywhere else). The report's JSON is
embedded too (``<script type="application/json" id="autosched-report">``), so the page carries its data."""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any

from autosched.errors import UserInputError
from autosched.report import SPLIT_PARTS, Report, TaskReport

COLORS = {"search": "#4c72b0", "build": "#dd8452", "measure": "#55a868", "other": "#bbbbbb"}
STATUS_COLORS = {"OK": "#55a868", "BUILD_ERROR": "#c44e52", "RUN_ERROR": "#8172b3", "TIMEOUT": "#937860",
                 "WRONG_RESULT": "#da8bc3", "INVALID": "#bbbbbb"}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta, .note { color: #666; } .note { font-style: italic; }
table { border-collapse: collapse; margin: .6em 0; max-width: 100%; }
td, th { padding: .25em .6em; border-bottom: 1px solid #eee; } th { text-align: left; background: #f6f6f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name { min-width: 12em; overflow-wrap: break-word; } td.knobs { min-width: 12em; }
td.knobs code { display: block; max-width: 26em; }
.searched { color: #2a6e3f; } .unsearched { color: #a0522d; } .searched, .unsearched { white-space: nowrap; }
details summary { color: #666; font-size: 12px; }
code { font-size: 12px; overflow-wrap: anywhere; }
.grid { display: flex; flex-wrap: wrap; gap: 12px; } figure { margin: 0; } figcaption { color: #666; font-size: 12px; }
img.plot { display: block; }
"""


def require_matplotlib():
    """matplotlib's Figure class, set up for SVG; a one-line error naming the extra where it is missing."""
    try:
        import matplotlib
    except ImportError as err:
        raise UserInputError("the HTML report needs matplotlib: pip install 'autosched[report]' (or use --format "
                             "json)") from err
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "autosched", "font.size": 9})
    from matplotlib.figure import Figure

    return Figure


def render_html(report: Report) -> str:
    """The whole page."""
    Figure = require_matplotlib()
    parts = [_header(report), _summary(report, Figure), _split(report, Figure), _curves(report, Figure),
             _best_table(report), _failures(report, Figure), _predictions(report, Figure), _footer(report)]
    data = json.dumps(report.to_json(), allow_nan=False).replace("</", "<\\/")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>autosched report: {_e(report.database)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(parts)
            + f"\n<script type=\"application/json\" id=\"autosched-report\">{data}</script>\n</body></html>\n")


# --- formatting --------------------------------------------------------------------------------------------------
def _e(x: Any) -> str:
    return html.escape(str(x))


def fmt_s(seconds: float | None) -> str:
    """A latency: ms from 0.1 ms up, us below."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.2f} us"


def fmt_wall(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s" if seconds < 600 else f"{seconds / 60:.1f} min"


def _name(name: str) -> str:
    """A task's name that may wrap after its underscores (a fused name runs to a hundred characters)."""
    return _e(name).replace("_", "_<wbr>")


def _num(x: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:{spec}}{suffix}"


def _table(head: list[str], rows: list[list[str]], numeric: set[int] | None = None, table_id: str = "") -> str:
    """Cells as given (HTML); the ``numeric`` columns right-aligned, the first a task's name (``_name``)."""
    numeric = numeric or set()
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    cls = lambda i: (" class=\"num\"" if i in numeric else " class=\"name\"" if i == 0  # noqa: E731
                     else " class=\"knobs\"" if head[i] == "knob values" else "")
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>" for row in rows)
    attr = f" id=\"{_e(table_id)}\"" if table_id else ""
    return f"<table{attr}><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(fig, alt: str, caption: str = "", plot_id: str = "") -> str:
    """A figure as an <img> with an SVG data URI (each SVG its own document: no id clashes between plots)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    uri = "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    cap = f"<figcaption>{_e(caption)}</figcaption>" if caption else ""
    attr = f" data-plot=\"{_e(plot_id)}\"" if plot_id else ""
    return f"<figure><img class=\"plot\"{attr} alt=\"{_e(alt)}\" src=\"{uri}\">{cap}</figure>"


def _log_if_wide(ax, values: list[float]) -> None:
    finite = [v for v in values if v and v > 0 and math.isfinite(v)]
    if finite and max(finite) / min(finite) > 20:
        ax.set_yscale("log")


def _us(values: list[float | None]) -> list[float]:
    return [v * 1e6 if v is not None else math.nan for v in values]


# --- sections ----------------------------------------------------------------------------------------------------
def _header(r: Report) -> str:
    targets = sorted({t.target for t in r.tasks})
    return (f"<h1>autosched tuning report</h1><p class=\"meta\">database {_e(r.database)} &middot; "
            f"{len(r.tasks)} tasks, {r.n_measured} measured candidates &middot; target {_e(', '.join(targets))} "
            f"&middot; autosched {_e(r.autosched_version)}</p>")


def _summary(r: Report, Figure) -> str:
    e2e = r.end_to_end
    untuned, final = e2e["untuned_s"], e2e["final_s"]
    speedup = f" ({untuned / final:.2f}x faster)" if untuned and final else ""
    lines = [f"<h2>End to end</h2><p>Estimated model latency (sum over tasks of weight x best latency): "
             f"<b>{fmt_s(final)}</b>, untuned {fmt_s(untuned)}{speedup}; tuning time {fmt_wall(r.time_split['wall_s'])}"
             f" in {r.time_split['n_runs']} run(s).</p>"]
    if e2e["time_s"]:
        lines.append(_img(end_to_end_figure(r, Figure), "estimated model latency vs tuning time",
                          "log scale: equal heights are equal speed-ups; gaps of over 15 minutes between records "
                          "(separate runs) are cut from the time axis", "end-to-end"))
    else:
        lines.append("<p class=\"note\">no task has a successful measurement yet: no end-to-end curve</p>")
    for m in e2e.get("measured", []):
        ratio = f", {m['model_s'] / final:.2f}x the estimate" if final else ""
        lines.append(f"<p class=\"measured\">Measured inside the model (its end-to-end phase, {_e(m['model'])}): "
                     f"<b>{fmt_s(m['model_s'])}</b> per inference (TVM's timer, the whole model){ratio}; the "
                     f"'in model' column below is each task's time inside it.</p>")
    lines += [f"<p class=\"note\">{_e(n)}</p>" for n in r.notes if "end-to-end" in n]
    return "\n".join(lines)


def end_to_end_figure(r: Report, Figure):
    """The estimated model latency against tuning time, on a log scale: a 23x fall leaves the last 5x of it
    half the height (on a linear axis it is squashed into the bottom tenth)."""
    e2e = r.end_to_end
    values = [v for v in (*e2e["estimated_s"], e2e["untuned_s"]) if v]
    unit, scale = ("ms", 1e3) if min(values) >= 1e-4 else ("us", 1e6)
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.subplots()
    ax.step(e2e["time_s"], [v * scale for v in e2e["estimated_s"]], where="post", color="#4c72b0",
            label="tuned (best so far)")
    if e2e["untuned_s"]:
        ax.axhline(e2e["untuned_s"] * scale, color="#999", ls="--", lw=1, label="untuned")
    _log_axis(ax, min(values) * scale, max(values) * scale)
    ax.set_xlabel("tuning time (s)")
    ax.set_ylabel(f"estimated latency ({unit}, log scale)")
    ax.grid(alpha=.3, which="both")
    ax.legend(loc="best")
    return fig


def _log_axis(ax, low: float, high: float) -> None:
    """A log scale labelled in plain numbers (1, 2, 5, 10, 20, ...: fewer minor labels the more decades)."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    decades = math.log10(high / low) if low > 0 else 9
    keep = range(1, 10) if decades < 0.7 else (2, 3, 5) if decades < 1.5 else (2, 5) if decades < 2.5 else ()

    def minor(v: float, _: int) -> str:
        return f"{v:g}" if v > 0 and round(v / 10 ** math.floor(math.log10(v) + 1e-9)) in keep else ""

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _split(r: Report, Figure) -> str:
    s = r.time_split
    parts = [*SPLIT_PARTS, "other"]
    out = ["<h2>Where the time went</h2>",
           f"<p>{s['n_trials']} searched trials in {fmt_wall(s['wall_s'])}: "
           f"<b>{s.get('trials_per_s', 0.0):.2f} trials per second</b>.</p>"]
    if s["wall_s"] > 0:
        fig = Figure(figsize=(7.5, 1.3))
        ax = fig.subplots()
        left = 0.0
        for p in parts:
            ax.barh([0], [s[f"{p}_s"]], left=left, color=COLORS[p], label=f"{p} {s[f'{p}_s']:.1f} s")
            left += s[f"{p}_s"]
        ax.set_yticks([])
        ax.set_xlabel("seconds")
        ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(.5, -.55), frameon=False)
        out.append(_img(fig, "time split between search, build, measurement and other", plot_id="time-split"))
    rows = [[_name(t.name), *(_num(t.timing[f"{p}_s"]) for p in SPLIT_PARTS), _num(t.timing["build_worker_s"]),
             f"{int(t.timing['n_timed'])} / {int(t.timing['n_trials'])}"] for t in r.tasks]
    rows.append(["<b>all</b>", *(_num(s[f"{p}_s"]) for p in SPLIT_PARTS), _num(s["build_worker_s"]),
                 f"{s['n_timed']} / {s['n_trials']}"])
    out.append(_table(["task", "search s", "build s (wall)", "measure s", "build s (worker total)",
                       "trials timed"], rows, {1, 2, 3, 4, 5}))
    out.append(f"<p class=\"note\">search: proposing candidates (sampler, cost-model screening and refits); build: "
               f"compiling a batch in parallel workers (wall time; the worker total is the sum over workers); "
               f"measure: running and checking each candidate; other ({_num(s['other_s'])} s): untuned baselines, "
               f"reference outputs, task extraction and bookkeeping, from the records' timestamps.</p>")
    out += [f"<p class=\"note\">{_e(n)}</p>" for n in r.notes if "time split" in n]
    return "\n".join(out)


def _task_curve(t: TaskReport, Figure) -> str:
    from matplotlib.ticker import MaxNLocator

    c = t.curve
    fig = Figure(figsize=(3.9, 2.7))
    ax = fig.subplots()
    ok = [(x, y) for x, y in zip(c.trial, c.latency_s, strict=True) if y is not None]
    if ok:
        ax.scatter([x for x, _ in ok], [y * 1e6 for _, y in ok], s=9, color="#9ab", label="measured", zorder=2)
    ax.step(c.trial, _us(c.best_s), where="post", color="#4c72b0", label="best so far", zorder=3)
    if t.untuned_s:
        ax.axhline(t.untuned_s * 1e6, color="#999", ls="--", lw=1, label="untuned")
    failed = [x for x, s in zip(c.trial, c.status, strict=True) if s != "OK"]
    if failed:
        ax.plot(failed, [0] * len(failed), "x", color="#c44e52", transform=ax.get_xaxis_transform(),
                clip_on=False, label="failed")
    _log_if_wide(ax, [y for _, y in ok])
    ax.set_title(f"{t.name} (x{t.weight})", fontsize=9)
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0.5, len(c.trial) + 0.5)
    ax.set_ylabel("latency (us)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7)
    best = t.best["latency_s"] if t.best else None
    return _img(fig, f"tuning curve of {t.name}", f"best {fmt_s(best)} after {len(c.trial)} trials", f"task-{t.key}")


def _curves(r: Report, Figure) -> str:
    figs = [_task_curve(t, Figure) for t in r.tasks if t.curve.trial]
    empty = [t.name for t in r.tasks if not t.curve.trial]
    note = f"<p class=\"note\">not measured yet: {_e(', '.join(empty))}</p>" if empty else ""
    return f"<h2>Tuning curves per task</h2><div class=\"grid\">{''.join(figs)}</div>{note}"


def _knobs(best: dict[str, Any]) -> str:
    if best["baseline"]:
        return "TVM's default (unscheduled) build"
    return "<code>" + _e(", ".join(f"{k}={v}" for k, v in best["params"].items())) + "</code>"


def _searched(t: TaskReport) -> str:
    """The short verdict, the whole sentence as its tooltip."""
    state = t.search.get("state", "")
    return (f"<span class=\"{'searched' if state == 'searched' else 'unsearched'}\" data-search=\"{_e(state)}\" "
            f"title=\"{_e(t.search.get('text', ''))}\">{_e(t.search.get('short', ''))}</span>")


def _best_table(r: Report) -> str:
    rows = []
    for t in r.tasks:
        b = t.best or {}
        knobs = _knobs(b) if b else "-"
        if b and not b["baseline"]:
            knobs += ("<details><summary>decisions</summary><code>" + _e(json.dumps(b["decisions"]))
                      + "</code></details>")
        rows.append([_name(t.name), _num(t.share * 100 if t.share is not None else None, ".1f", " %"), _searched(t),
                     _e(t.pattern), str(t.weight), str(t.n_measured), fmt_s(t.untuned_s), fmt_s(b.get("latency_s")),
                     _inside(t), _num(b.get("gflops")), _rate(b), _num(b.get("speedup"), ".2f", "x"),
                     str(b.get("trial", "-")), knobs])
    return ("<h2>Best schedule per task</h2><p>Largest share of the estimated model latency first (share: the "
            "task's weight x best latency over the sum of them). 'in model': per call, timed inside the model by its "
            "end-to-end phase (* another schedule than the fastest alone runs there: it was faster in the model). "
            "GB/s: the task's buffers, inputs and outputs, over "
            f"its best latency, in brackets its share of {_copy_text(r)}.</p>" + _table(
                ["task", "share", "searched?", "pattern", "weight", "trials", "untuned", "best", "in model", "GFLOPS",
                 "GB/s", "speedup", "at trial", "knob values"], rows, set(range(4, 13)) | {1},
                "best-per-task"))


def _rate(best: dict) -> str:
    """'5.0 (96 %)': GB/s and the share of the copy bandwidth, where known."""
    if best.get("gbps") is None:
        return "-"
    share = f" ({best['of_copy'] * 100:.0f} %)" if best.get("of_copy") is not None else ""
    return f"{best['gbps']:.1f}{share}"


def _inside(t: TaskReport) -> str:
    seen = t.in_model or {}
    if seen.get("in_model_s") is None:
        return "-"
    return fmt_s(seen["in_model_s"] / max(t.weight, 1)) + ("" if seen["chosen_is_best"] else " *")


def _copy_text(r: Report) -> str:
    """This machine's copy bandwidth per target, in words."""
    if not r.copy_bandwidth:
        return "this machine's copy bandwidth (unknown here: the tasks were tuned for another machine)"
    rates = ", ".join(f"{rate / 1e9:.1f} GB/s for {target}" for target, rate in sorted(r.copy_bandwidth.items()))
    return f"this machine's copy bandwidth at the target's threads ({rates})"


def _failures(r: Report, Figure) -> str:
    statuses = [s for s in STATUS_COLORS if r.failures.get(s)]
    out = ["<h2>Outcomes by status</h2>"]
    if statuses:
        fig = Figure(figsize=(6, 0.4 + 0.3 * len(statuses)))
        ax = fig.subplots()
        ax.barh(statuses, [r.failures[s] for s in statuses], color=[STATUS_COLORS[s] for s in statuses])
        ax.invert_yaxis()
        ax.set_xlabel("candidates")
        out.append(_img(fig, "candidates by status", plot_id="status"))
    rows = [[_name(t.name), *(str(t.status_counts.get(s, 0)) for s in STATUS_COLORS)] for t in r.tasks]
    out.append(_table(["task", *STATUS_COLORS], rows, set(range(1, len(STATUS_COLORS) + 1))))
    errors = [f"<li><b>{_e(t.name)}</b> {_e(s)}: <code>{_e(line)}</code></li>"
              for t in r.tasks for s, lines in t.errors.items() for line in lines]
    if errors:
        out.append("<p>Examples of errors:</p><ul>" + "".join(errors) + "</ul>")
    out.append("<p class=\"note\">INVALID: rejected before building (an illegal knob combination); the others were "
               "built and run.</p>")
    return "\n".join(out)


def _predictions(r: Report, Figure) -> str:
    out = ["<h2>Cost model: predicted vs measured</h2>"]
    with_preds = [t for t in r.tasks if t.predictions.predicted]
    if not with_preds:
        return out[0] + "".join(f"<p class=\"note\">{_e(n)}</p>" for n in r.notes if "prediction" in n)
    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    for t in with_preds:
        ax.scatter(t.predictions.predicted, t.predictions.measured, s=10, label=t.name, alpha=.8)
    ax.set_xlabel("predicted score")
    ax.set_ylabel("measured: best latency / latency")
    ax.grid(alpha=.3)
    if len(with_preds) <= 12:
        ax.legend(fontsize=6)
    out.append(_img(fig, "cost-model predicted score vs measured relative speed", plot_id="predictions"))
    rows = [[_name(t.name), str(len(t.predictions.predicted)), _num(t.predictions.spearman, "+.2f")]
            for t in with_preds]
    rows.append(["<b>all</b>", str(r.predictions["n"]), _num(r.predictions["spearman"], "+.2f")])
    out.append(_table(["task", "predicted candidates", "Spearman rank corr."], rows, {1, 2}))
    out.append("<p class=\"note\">Only candidates the cost model picked carry a prediction (a task's first ones are "
               "measured before the model screens). The model is trained on best latency / latency (1 = the task's "
               "best, 0 = failed), so a good model puts the points near a rising line.</p>")
    return "\n".join(out)


def _footer(r: Report) -> str:
    db = r.database
    url = db if "://" in db else f"sqlite:///{db}"
    return (f"<h2>Explore the search</h2><p>The database holds Optuna's own storage (one study per task, named "
            f"<code>autosched-&lt;task key&gt; &lt;task&gt; · &lt;pattern&gt; · &lt;shapes&gt; · &lt;target&gt;"
            f"</code>): <code>optuna-dashboard {_e(url)}</code> opens it.</p>")
