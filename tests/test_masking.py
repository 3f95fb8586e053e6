"""One rule for secrets: a database URL's password is never printed, logged, raised or written into a file.

A password is planted in a PostgreSQL URL pointing at a closed port (nothing needs a server: each command fails at
once); every command's stdout, stderr, files and the log file are searched for it. The masked form must appear in
the error line, so a command that printed nothing would not pass.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autosched.masking import mask_argv, mask_data, mask_secrets

ROOT = Path(__file__).resolve().parents[1]  # this checkout's autosched, whatever the subprocess's folder
PLANTED = "s3cr3t-PLANTED-pw"
URL = f"postgresql://u:{PLANTED}@127.0.0.1:1/x"
MASKED = "postgresql://u:***@127.0.0.1:1/x"


# --- the one function -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,want", [
    (URL, MASKED),
    ("postgresql+psycopg://u:p%40ss%3Aw@h:5432/d?sslmode=require", "postgresql+psycopg://u:***@h:5432/d?sslmode=require"),
    ("postgresql://u:p@ss:w@h/d", "postgresql://u:***@h/d"),  # an unencoded "@" or ":" in the password
    ("postgresql://:pw@h/d", "postgresql://:***@h/d"),  # no user
    ("postgresql://u@h/d", "postgresql://u@h/d"),  # a user, no password: nothing to hide
    ("postgresql://h/d", "postgresql://h/d"),
    ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ("tuning_logs/a:b@c.db", "tuning_logs/a:b@c.db"),  # a path is no URL
    ("host=x password=secret dbname=y", "host=x password=*** dbname=y"),  # libpq's keyword form
    ("host=x password = 'a b\\' c' user=z", "host=x password = *** user=z"),
    ("postgresql://u@h/d?password=q&x=1", "postgresql://u@h/d?password=***"),
    ("from postgresql://u:one@h/x and mysql://v:two@h2/y.", "from postgresql://u:***@h/x and mysql://v:***@h2/y."),
    (f"cannot open database {URL}: (psycopg.OperationalError) connection failed",
     f"cannot open database {MASKED}: (psycopg.OperationalError) connection failed"),
    (f"backend(db='{URL}', time=0)", f"backend(db='{MASKED}', time=0)"),
])
def test_mask_secrets(text, want):
    assert mask_secrets(text) == want


def test_mask_argv_and_data():
    assert mask_argv(["compile", "--db", URL, f"--db={URL}", "-o", "m"]) == [
        "compile", "--db", MASKED, f"--db={MASKED}", "-o", "m"]
    assert mask_data({"a": [URL, 1, None], "b": {"c": URL}}) == {"a": [MASKED, 1, None], "b": {"c": MASKED}}


def test_display_name_is_the_same_rule():
    from autosched.db import display_name

    assert display_name(URL) == MASKED and display_name("tuning_logs/x.db") == "tuning_logs/x.db"


# --- the command line, as subprocesses ----------------------------------------------------------------------------
def _cli_runs(tmp: Path) -> dict[str, dict]:
    """Each command run with the planted URL, all at once (each fails fast on the closed port): its output."""
    from autosched.db import open_database
    from autosched.db.transfer import export_jsonl

    empty = tmp / "empty.db"
    o = tmp / "out"
    o.mkdir()
    with open_database(str(empty)) as db:
        export_jsonl(db, o / "empty.jsonl")
    commands = {
        "show": ["show", "--db", URL],
        "report": ["report", "--db", URL, "-o", str(o / "r.html")],
        "export": ["export", "--db", URL, "-o", str(o / "e.jsonl")],
        "import": ["import", str(o / "empty.jsonl"), "--db", URL],
        "doctor": ["doctor", "--db", URL],
        "train-cost-model": ["train-cost-model", "--db", URL, "-o", str(o / "cm")],
        "tune": ["tune", "--op", "matmul", "--shape", "8,8,8", "--trials", "1", "--db", URL],
        "compile": ["compile", "zoo:tiny_mlp", "--threads", "1", f"--db={URL}", "-o", str(o / "fail.autosched")],
        # the URL in the command line, the SQLite database used (the last --db wins): what the artifact stores
        "compile-stored": ["compile", "zoo:tiny_mlp", "--threads", "1", "--db", URL, f"--db={URL}", "--db",
                           str(empty), "-o", str(o / "m.autosched")],
    }
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache"), "AUTOSCHED_QUIET": "1", "PYTHONPATH": str(ROOT)}
    procs = {name: subprocess.Popen([sys.executable, "-m", "autosched.cli", *argv], cwd=tmp, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, argv in commands.items()}
    runs = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        runs[name] = {"rc": proc.returncode, "out": out, "err": err}
    return runs


def _files_text(root: Path) -> dict[str, str]:
    """Every file under ``root`` as text (zip members too: an artifact)."""
    texts = {}
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for member in zf.namelist():
                    texts[f"{path}!{member}"] = zf.read(member).decode("utf-8", "replace")
        texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    return texts


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secrets")
    return tmp, _cli_runs(tmp)


@pytest.mark.long
@pytest.mark.slow  # the fixture: nine commands at once, ~30 s on two busy cores
@pytest.mark.parametrize("command", ["show", "report", "export", "import", "doctor", "train-cost-model", "tune",
                                     "compile"])
def test_a_command_that_cannot_open_the_database_says_so_without_the_password(cli, command):
    run = cli[1][command]
    assert PLANTED not in run["out"] + run["err"], run
    assert run["rc"] == 2 and f"autosched: error: cannot open database {MASKED}" in run["err"], run


@pytest.mark.long
@pytest.mark.slow
def test_an_artifact_stores_its_command_line_masked(cli):
    tmp, runs = cli
    run = runs["compile-stored"]
    assert run["rc"] == 0 and PLANTED not in run["out"] + run["err"], run
    with zipfile.ZipFile(tmp / "out" / "m.autosched") as zf:
        command = json.loads(zf.read("manifest.json"))["provenance"]["command"]
    assert command[5:8] == ["--db", MASKED, f"--db={MASKED}"], command


@pytest.mark.long
@pytest.mark.slow
def test_no_file_written_by_any_command_holds_the_password(cli):
    tmp, _ = cli
    texts = _files_text(tmp)
    assert any(p.endswith("autosched.log") for p in texts), sorted(texts)  # the log file is searched too
    assert [p for p, text in texts.items() if PLANTED in text] == []


# --- the Python API -----------------------------------------------------------------------------------------------
def test_opening_the_database_raises_a_masked_error():
    from autosched.db import open_database
    from autosched.errors import DatabaseError

    with pytest.raises(DatabaseError) as err:
        open_database(URL)
    assert PLANTED not in str(err.value) and MASKED in str(err.value)


def test_doctor_diagnose_names_the_database_masked(tmp_path):
    from autosched.db import open_database
    from autosched.doctor import diagnose
    from autosched.errors import DatabaseError

    with pytest.raises(DatabaseError) as err:
        diagnose(URL, logs=False)
    assert PLANTED not in str(err.value) and MASKED in str(err.value)
    path = tmp_path / "t.db"
    open_database(str(path)).close()
    report = diagnose(str(path), db_name=URL, logs=False)
    assert PLANTED not in json.dumps(report) and report["database"]["name"] == MASKED


def test_report_gather_names_the_database_masked(tmp_path):
    from autosched.db import open_database
    from autosched.report import gather

    with open_database(str(tmp_path / "t.db")) as db:
        assert gather(db, URL).database == MASKED
        db.url = URL  # a PostgreSQL database as SQLAlchemy names it (none can be started here)
        assert gather(db).database == MASKED


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_records_error_is_stored_masked(kind, tmp_path):
    from autosched.db import MemoryDatabase, SQLDatabase, TaskRow
    from autosched.records import Status, TuningRecord

    db = MemoryDatabase() if kind == "memory" else SQLDatabase(str(tmp_path / "t.db"))
    db.commit_task(TaskRow("k1", "matmul_8x8x8", '{"kind": "llvm"}', 1, "{}", 1024.0, {"op": "matmul"}))
    db.commit([TuningRecord("k1", '{"kind": "llvm"}', {"a": 1}, [[1, 2]], [["inst"], []], Status.RUN_ERROR, [],
                            f"worker failed: could not reach {URL}", "0.1.0", "0.27", 1)])
    [stored] = db.records("k1")
    assert stored.error == f"worker failed: could not reach {MASKED}"
    db.close()


def test_a_cost_models_meta_holds_no_password(tmp_path):
    from autosched.cli import main
    from autosched.cost import XGBCostModel

    src = tmp_path / "v1.db"  # a copy: opening migrates it
    shutil.copy(Path(__file__).parent / "fixtures" / "db_v1.db", src)
    out = tmp_path / "model"
    assert main(["--log", str(tmp_path / "l.log"), "train-cost-model", "--db", str(src), "-o", str(out),
                 "--rounds", "2"]) == 0
    model = XGBCostModel.load(out, "llvm")
    model.save(tmp_path / "again", command=f"autosched train-cost-model --db {URL}", trained_on={"databases": [URL]})
    meta = (tmp_path / "again" / "meta.json").read_text()
    assert PLANTED not in meta and MASKED in meta


def test_the_log_file_masks_what_libraries_log(tmp_path):
    from autosched.native_log import native_output_to

    path = tmp_path / "a.log"
    with native_output_to(path):
        logging.getLogger("autosched.test").warning("connecting to %s", URL)
        try:
            raise RuntimeError(f"driver failed for {URL}")
        except RuntimeError:
            logging.getLogger("autosched.test").exception("failed")
    text = path.read_text()
    assert PLANTED not in text and text.count(MASKED) == 2


def test_the_torch_backend_shows_its_database_masked():
    torch = pytest.importorskip("torch")
    import autosched

    backend = autosched.backend(db=URL, time=1, threads=1, verbose=False)
    assert PLANTED not in repr(backend) and MASKED in repr(backend)
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        x = torch.randn(2, 4)
        assert torch.allclose(compiled(x), model(x))  # eager: the database cannot be opened
    [stats] = backend.stats
    assert stats.mode == "eager" and PLANTED not in stats.reason and MASKED in stats.reason, stats.reason
