"""``autosched report``: the numbers from a hand-made database, the HTML and JSON of tiny real tuning runs, Optuna
loading every study of a tuning database, and the page and optuna-dashboard's study list in a real headless
browser."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest

from autosched.cli import main
from autosched.db import TaskRow, open_database
from autosched.records import Status, TuningRecord
from autosched.report import TuningClock, gather
from autosched.report_html import end_to_end_figure, fmt_s, render_html, require_matplotlib
from autosched.search.study import parse_study_name, study_name

TARGET = json.dumps({"kind": "llvm", "mcpu": "x", "num-cores": 1})


def _rec(key: str, status: Status, latency_s: float | None, at: float, baseline: bool = False,
         predicted: float | None = None, error: str | None = None) -> TuningRecord:
    return TuningRecord(key, TARGET, {"baseline": "unscheduled"} if baseline else {"k": at},
                        ["unscheduled"] if baseline else [at], None, status,
                        [latency_s] * 3 if latency_s is not None else [], error, "0", "0", 1, created_at=at,
                        predicted_score=predicted)


@pytest.fixture()
def handmade_db(tmp_path):
    """Two tasks of a model (A runs twice per inference); a second run an hour after the first."""
    db = open_database(str(tmp_path / "h.db"))
    for key, weight in (("A", 2), ("B", 1)):
        db.commit_task(TaskRow(key, f"task_{key}", TARGET, 1, "{}", 2e6, {"group": key, "weight": weight}))
    db.commit([_rec("A", Status.OK, 4e-3, 100.0, baseline=True), _rec("B", Status.OK, 1e-3, 105.0, baseline=True),
               _rec("A", Status.OK, 2e-3, 110.0, predicted=0.5),
               _rec("A", Status.BUILD_ERROR, None, 111.0, error="boom\ntraceback"),
               _rec("A", Status.INVALID, None, 112.0, error="illegal"), _rec("B", Status.OK, 5e-4, 120.0),
               _rec("A", Status.OK, 1e-3, 3700.0, predicted=0.9)])
    yield db
    db.close()


def test_gather_from_a_handmade_database(handmade_db):
    r = gather(handmade_db, "h.db")
    a, b = r.tasks
    assert (a.name, a.weight, a.n_measured, a.n_rejected) == ("task_A", 2, 4, 1)
    assert a.curve.trial == [1, 2, 3, 4] and a.curve.latency_s == [4e-3, 2e-3, None, 1e-3]
    assert a.curve.best_s == [4e-3, 2e-3, 2e-3, 1e-3] and a.curve.baseline_trial == 1
    assert a.best["latency_s"] == 1e-3 and a.best["trial"] == 4 and a.best["speedup"] == pytest.approx(4.0)
    assert a.best["gflops"] == pytest.approx(2.0) and a.errors == {"BUILD_ERROR": ["boom"], "INVALID": ["illegal"]}
    assert a.n_bytes is None and a.best["gbps"] is None and not r.copy_bandwidth  # no PrimFunc, not this CPU
    assert a.predictions.predicted == [0.5, 0.9] and a.predictions.measured == [0.5, 1.0]
    assert r.failures == {"OK": 5, "BUILD_ERROR": 1, "INVALID": 1}
    # the hour between the runs is cut: 20 s of tuning in 2 runs
    assert r.time_split["wall_s"] == pytest.approx(20.0) and r.time_split["n_runs"] == 2
    e2e = r.end_to_end
    assert e2e["time_s"] == pytest.approx([5.0, 10.0, 20.0, 20.0])
    assert e2e["estimated_s"] == pytest.approx([9e-3, 5e-3, 4.5e-3, 2.5e-3])  # 2 x A + B
    assert e2e["untuned_s"] == pytest.approx(9e-3) and e2e["final_s"] == pytest.approx(2.5e-3)
    assert e2e["weights_known"] and not e2e["missing"]
    assert (a.share, b.share) == pytest.approx((0.8, 0.2))  # 2 x 1 ms and 0.5 ms of the 2.5 ms
    assert b.timing["n_trials"] == 0 and r.predictions["n"] == 2 and r.predictions["spearman"] is None
    assert json.loads(r.dumps())["end_to_end"]["estimated_s"] == e2e["estimated_s"]


def test_a_task_of_this_cpu_has_its_gb_per_s_against_the_copy_bandwidth(tmp_path):
    from autosched._tvm import save_json
    from autosched.bandwidth import copy_bandwidth
    from autosched.spaces.settings import settings_for
    from autosched.targets import host_target, target_json
    from autosched.tasks import op_task

    target = host_target(1)
    task = op_task("elementwise", (1024,), target, settings_for(target).version)
    db = open_database(str(tmp_path / "bw.db"))
    db.commit_task(TaskRow(task.key, task.name, task.target_json, 1, save_json(task.mod), task.flops, {}))
    db.commit([dataclasses.replace(_rec(task.key, Status.OK, 1e-6, 100.0, baseline=True), target=target_json(target))])
    r = gather(db, "bw.db")
    (t,) = r.tasks
    assert t.n_bytes == task.n_bytes > 0 and t.best["gbps"] == pytest.approx(task.n_bytes / 1e-6 / 1e9)
    assert r.copy_bandwidth == {t.target: copy_bandwidth(1)}
    assert t.best["of_copy"] == pytest.approx(t.best["gbps"] * 1e9 / copy_bandwidth(1))
    pytest.importorskip("matplotlib")
    page = render_html(r)
    assert "<th>GB/s</th>" in page and "copy bandwidth at the target" in page
    db.close()


def test_tuning_clock_cuts_gaps_between_runs():
    clock = TuningClock([10.0, 12.0, 5000.0, 5003.0], gap_s=60)
    assert [clock(t) for t in (10.0, 12.0, 5000.0, 5003.0)] == [0.0, 2.0, 2.0, 5.0]
    assert clock.wall_s == 5.0 and clock.n_runs == 2


def test_a_task_without_weight_or_success_is_named(handmade_db):
    handmade_db.commit_task(TaskRow("C", "task_C", TARGET, 1, "{}", 1e6, {"group": "C"}))
    handmade_db.commit([_rec("C", Status.RUN_ERROR, None, 130.0, error="crash")])
    r = gather(handmade_db)
    assert r.end_to_end["missing"] == ["task_C"] and any("task_C" in n for n in r.notes)
    assert r.tasks[2].weight_known is False and r.tasks[2].best is None


def _study(storage, name: str, n_trials: int) -> None:
    import optuna

    study = optuna.create_study(study_name=name, storage=storage)
    for _ in range(n_trials):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1e-3, user_attrs={
            "status": "OK", "timing_s": {"search": 0.1, "build": 0.2, "measure": 0.3}}))


def test_tasks_by_share_and_whether_searched(handmade_db):
    """Largest share of the estimate first; each task says whether its study measured trials (a study named as now
    or as before labels), else what was measured of it."""
    storage = handmade_db.optuna_storage()
    _study(storage, study_name("A", {"task": "task_A", "target": "llvm x x1"}), 2)
    _study(storage, "autosched-B", 1)  # named as by an older autosched
    _study(storage, "someone else's", 4)
    for key, weight in (("C", 3), ("D", 1), ("E", 1)):
        handmade_db.commit_task(TaskRow(key, f"task_{key}", TARGET, 1, "{}", 2e6, {"group": key, "weight": weight}))
    handmade_db.commit([_rec("C", Status.OK, 9e-3, 130.0, baseline=True), _rec("C", Status.OK, 3e-3, 131.0),
                        _rec("D", Status.OK, 1e-4, 132.0, baseline=True)])
    r = gather(handmade_db)
    assert [t.name for t in r.tasks] == ["task_C", "task_A", "task_B", "task_D", "task_E"]
    assert [t.share for t in r.tasks] == pytest.approx([9 / 11.6, 2 / 11.6, 0.5 / 11.6, 0.1 / 11.6, None])
    searched = {t.name: (t.search["state"], t.search["n_trials"]) for t in r.tasks}
    assert searched == {"task_A": ("searched", 2), "task_B": ("searched", 1), "task_C": ("defaults", 0),
                        "task_D": ("untuned only", 0), "task_E": ("never reached", 0)}
    assert r.tasks[0].search["text"].startswith("not searched: 1 default candidates measured")
    assert r.time_split["n_trials"] == 3
    page = render_html(r)
    table = re.search(r'<table id="best-per-task">(.*?)</table>', page, re.S).group(1)
    names = re.findall(r'<td class="name">(.*?)</td>', table)
    assert [n.replace("<wbr>", "") for n in names] == [t.name for t in r.tasks]
    assert re.findall(r'data-search="([^"]*)"', table) == [t.search["state"] for t in r.tasks]
    assert ">yes: 2 trials<" in table and ">no: 1 defaults<" in table and ">never reached<" in table


def test_an_export_says_what_it_cannot_tell(handmade_db, tmp_path):
    """No Optuna study in a JSON-lines export: a task with cost-model picks was searched, another is unknown."""
    from autosched.db.transfer import export_jsonl

    export_jsonl(handmade_db, tmp_path / "h.jsonl")
    a, b = gather(open_database(str(tmp_path / "h.jsonl"), create=False)).tasks
    assert (a.search["state"], a.search["n_trials"], b.search["state"]) == ("searched", None, "unknown")


def test_the_end_to_end_curve_is_on_a_log_scale(tmp_path):
    """A 23x fall (23 -> 5 -> 1 ms): the last 5x takes half the axis, not the bottom sixth of a linear one."""
    db = open_database(str(tmp_path / "fall.db"))
    db.commit_task(TaskRow("A", "task_A", TARGET, 1, "{}", 2e6, {"weight": 1}))
    db.commit([_rec("A", Status.OK, 23e-3, 100.0, baseline=True), _rec("A", Status.OK, 5e-3, 110.0),
               _rec("A", Status.OK, 1e-3, 120.0)])
    ax = end_to_end_figure(gather(db), require_matplotlib()).axes[0]
    db.close()
    ax.get_ylim()  # autoscaled
    height = lambda ms: ax.transAxes.inverted().transform(ax.transData.transform((110.0, ms)))[1]  # noqa: E731
    assert ax.get_yscale() == "log" and "ms" in ax.get_ylabel()
    assert height(5) - height(1) > 0.4 and height(23) - height(5) > 0.4


# --- bad input ---------------------------------------------------------------------------------------------------
def _one_line_exit_2(argv, capsys, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("autosched: error:"), err


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "r.html"
    _one_line_exit_2(["report", "--db", str(tmp_path / "nope.db"), "-o", str(out)], capsys, "does not exist")
    garbage = tmp_path / "model.onnx"
    garbage.write_bytes(b"\x08\x07garbage" * 10)
    _one_line_exit_2(["report", "--db", str(garbage), "-o", str(out)], capsys, "not an autosched database")
    open_database(str(tmp_path / "empty.db")).close()
    _one_line_exit_2(["report", "--db", str(tmp_path / "empty.db"), "-o", str(out)], capsys, "holds no tasks")
    _one_line_exit_2(["report", "--db", str(garbage), "-o", str(out), "--format", "pdf"], capsys, "invalid choice")
    assert not out.exists() and not (tmp_path / "nope.db").exists()


def test_html_without_matplotlib_names_the_extra(handmade_db, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    _one_line_exit_2(["report", "--db", handmade_db.url[len("sqlite:///"):], "-o", str(tmp_path / "r.html")],
                     capsys, "pip install 'autosched[report]'")
    assert main(["report", "--db", handmade_db.url, "-o", str(tmp_path / "r.json")]) == 0  # JSON needs none


# --- tiny real tuning runs ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def op_db(tmp_path_factory):
    from autosched.api import tune_operator
    from autosched.config import TuneConfig

    path = tmp_path_factory.mktemp("op") / "mm.db"
    tune_operator("matmul", (16, 16, 16), db=str(path), config=TuneConfig(n_trials=4, n_threads=1, batch_size=4))
    return path


@pytest.fixture(scope="module")
def model_report(tmp_path_factory):
    """zoo:tiny_mlp tuned with 4 trials per task (its baseline and default schedule, then searches), and its
    report as HTML and JSON."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    d = tmp_path_factory.mktemp("model")
    db, log = d / "mlp.db", str(d / "log.txt")
    assert main(["--log", log, "tune", "zoo:tiny_mlp", "--trials", "4", "--threads", "1", "--batch", "2",
                 "--db", str(db)]) == 0
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    assert main(["--log", log, "report", "--db", str(db), "-o", str(d / "report.html")]) == 0
    assert main(["--log", log, "report", "--db", str(db), "-o", str(d / "out" / "report.json")]) == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # reading never writes
    return db, d / "report.html", json.loads((d / "out" / "report.json").read_text())


@pytest.fixture(scope="module")
def example_report(tmp_path_factory):
    """The report of a shipped example log (the MLP's, tuned for 2 minutes), read from the export as it is."""
    log = Path(__file__).resolve().parents[1] / "tuning_logs" / "example_mlp.jsonl.gz"
    d = tmp_path_factory.mktemp("example")
    assert main(["--log", str(d / "log.txt"), "report", "--db", str(log), "-o", str(d / "report.html")]) == 0
    assert main(["--log", str(d / "log.txt"), "report", "--db", str(log), "-o", str(d / "report.json")]) == 0
    return log, d / "report.html", json.loads((d / "report.json").read_text())


@pytest.mark.slow
def test_report_of_a_model_run(model_report):
    _, html_path, data = model_report
    page = html_path.read_text()
    # self-contained: nothing to fetch (matplotlib's SVGs only name their XML namespaces)
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import|<link\b|<script\b[^>]*\bsrc=", page, re.I)
    assert all(uri.startswith("data:image/svg+xml;base64,") for uri in re.findall(r'<img[^>]*\ssrc="([^"]+)"', page))
    plots = re.findall(r'data-plot="([^"]+)"', page)
    tasks = data["tasks"]
    assert len(tasks) >= 2 and "end-to-end" in plots and "time-split" in plots
    assert sorted(p for p in plots if p.startswith("task-")) == sorted(f"task-{t['key']}" for t in tasks)
    # the page carries the same numbers as --format json
    embedded = json.loads(re.search(r'id="autosched-report">(.*?)</script>', page, re.S).group(1))
    assert {**embedded, "generated_at": 0} == {**data, "generated_at": 0}
    for t in tasks:
        assert t["best"] and fmt_s(t["best"]["latency_s"]) in page and t["name"] in page
        assert t["n_bytes"] > 0 and t["best"]["gbps"] > 0 and t["best"]["of_copy"] > 0  # tuned on this CPU
        assert t["curve"]["baseline_trial"] == 1  # the untuned build is measured first and kept
    e2e = data["end_to_end"]
    assert e2e["final_s"] == pytest.approx(sum(t["weight"] * t["best"]["latency_s"] for t in tasks))
    assert e2e["untuned_s"] and e2e["final_s"] <= e2e["untuned_s"] and fmt_s(e2e["final_s"]) in page
    [measured] = e2e["measured"]  # the run's end-to-end phase: the model's own latency beside the estimate
    assert measured["model"] == "tiny_mlp" and measured["n_tasks"] == len(tasks)
    assert "Measured inside the model" in page and fmt_s(measured["model_s"]) in page
    assert all(t["in_model"]["in_model_s"] > 0 for t in tasks)  # each task's kernels, timed inside the model
    split = data["time_split"]
    assert split["n_timed"] == split["n_trials"] > 0  # every searched trial has its time split
    assert split["search_s"] > 0 and split["build_s"] > 0 and split["measure_s"] > 0
    assert sum(split[k] for k in ("search_s", "build_s", "measure_s", "other_s")) == pytest.approx(split["wall_s"])
    assert sum(data["failures"].values()) == sum(t["n_measured"] + t["n_rejected"] for t in tasks)


@pytest.mark.slow
def test_optuna_loads_every_study_of_a_tuning_database(op_db, model_report):
    import optuna

    for path in (op_db, model_report[0]):
        url = f"sqlite:///{path}"
        db = open_database(str(path), create=False)
        keys = {t.task_key for t in db.tasks()}
        searched = {r.task_key for r in db.records() if r.decisions != ["unscheduled"]}
        db.close()
        summaries = optuna.get_all_study_summaries(storage=url)
        found = {parse_study_name(s.study_name)[0] for s in summaries}
        assert found and found <= searched <= keys
        if path == op_db:  # one operator: every schedule measured came from its study (a model's defaults do not)
            assert found == searched
        for s in summaries:
            study = optuna.load_study(study_name=s.study_name, storage=url)
            done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
            assert done and study.best_value > 0
            assert all(set(t.user_attrs["timing_s"]) >= {"search", "build", "measure"} for t in done)


# --- a real browser ----------------------------------------------------------------------------------------------
def _chromium(width: int = 1280):
    """A WebDriver for the system's headless Chromium (Debian: apt-get install chromium chromium-driver), or a
    skip saying what is missing. The driver is given explicitly: Selenium Manager would go to the network."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                   None)
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip("no headless Chromium with chromedriver on PATH (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},999"):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(executable_path=driver))


def _drawn(png: bytes) -> tuple[float, int]:
    """Share of non-white pixels and number of distinct colours in a screenshot."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    colours = dict((c, n) for n, c in img.getcolors(maxcolors=img.width * img.height))
    return 1 - colours.get((255, 255, 255), 0) / (img.width * img.height), len(colours)


LONG_NAME = "fused_matmul3_add5_multiply1_multiply1_multiply2_add6_multiply3_tir_tanh_add7_multiply1_multiply41"


@pytest.fixture()
def long_names_report(handmade_db, tmp_path):
    """The hand-made database and a GPT-2 task's name (100 characters, no space) with a best of 18 knobs."""
    handmade_db.commit_task(TaskRow("L", LONG_NAME, TARGET, 1, "{}", 2e6, {"group": "L", "weight": 2,
                                                                           "pattern": "out-elementwise-fusable"}))
    knobs = {f"d0.{i}.tile{j}": i + j for i in range(6) for j in range(3)}
    handmade_db.commit([_rec("L", Status.OK, 2e-3, 106.0, baseline=True),
                        dataclasses.replace(_rec("L", Status.OK, 5e-4, 3710.0), params=knobs,
                                            decisions=[[1, 2, 4, 8]] * 9)])
    r = gather(handmade_db, "h.db")
    path = tmp_path / "long.html"
    path.write_text(render_html(r))
    return None, path, r.to_json()


@pytest.mark.slow
@pytest.mark.parametrize("report", ["model_report", "example_report", "long_names_report"])
def test_the_report_renders_in_a_headless_browser(report, request):
    from selenium.webdriver.common.by import By

    _, html_path, data = request.getfixturevalue(report)
    browser = _chromium(width=1400)
    try:
        browser.get(html_path.as_uri())
        # nothing wider than a 1400-pixel window (a fused task's name is a hundred characters without a space)
        width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth, "
                                       "Math.max(...Array.from(document.querySelectorAll('table'), "
                                       "t => t.getBoundingClientRect().right))]")
        assert width[1] == 1400 and width[0] <= width[1] and width[2] <= width[1], width
        images = browser.execute_script(
            "return Array.from(document.images).map(i => {const r = i.getBoundingClientRect(); return "
            "{plot: i.dataset.plot, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, bw: r.width, "
            "bh: r.height};})")
        fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert not [u for u in fetched if not u.startswith(("data:", "file:"))]  # nothing from the network
        assert len(images) == len(data["tasks"]) + 3 + bool(data["predictions"]["n"])  # e2e, split, statuses, preds
        for img in images:
            assert img["complete"] and img["w"] > 50 and img["h"] > 50 and img["bw"] > 50 and img["bh"] > 50, img
        for element in browser.find_elements(By.CSS_SELECTOR, "img.plot"):
            browser.execute_script("arguments[0].scrollIntoView()", element)
            ink, colours = _drawn(element.screenshot_as_png)
            assert 0.02 < ink < 0.9 and colours > 8, (element.get_attribute("data-plot"), ink, colours)
        ink, colours = _drawn(browser.get_screenshot_as_png())
        assert ink > 0.02 and colours > 8
        assert browser.find_element(By.TAG_NAME, "h1").text == "autosched tuning report"
    finally:
        browser.quit()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Some regimes for parameter")  # the importances of a 4-trial study
def test_the_optuna_dashboard_lists_each_study_by_its_task(op_db):
    """optuna-dashboard's study list shows names only (and filters on them): the task's name, shapes and target
    are in its study's name; its page shows the trials."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    dashboard = pytest.importorskip("optuna_dashboard", reason="pip install 'autosched[report]'")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    db = open_database(str(op_db), create=False)
    (task,) = db.tasks()
    db.close()

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = make_server("127.0.0.1", 0, dashboard.wsgi(f"sqlite:///{op_db}"), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = _chromium()
    try:
        browser.get(f"http://127.0.0.1:{server.server_port}/dashboard")
        body = lambda: browser.find_element(By.TAG_NAME, "body").text  # noqa: E731
        WebDriverWait(browser, 60).until(lambda _: task.task_key in body())
        (card,) = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "h5") if task.task_key in e.text]
        assert f"autosched-{task.task_key} matmul_16x16x16 · 16x16, 16x16 -> 16x16 float32 · llvm " in card
        browser.find_element(By.XPATH, f"//h5[contains(., '{task.task_key}')]").click()
        WebDriverWait(browser, 60).until(lambda _: "/studies/" in browser.current_url and "Trial" in body())
    finally:
        browser.quit()
        server.shutdown()
        server.server_close()
