"""``autosched compile -o model.autosched`` and ``autosched run model.autosched``: an artifact from the command line;
a corrupt or foreign one is one line and exit 2."""

from __future__ import annotations

import zipfile

import pytest

from autosched.cli import main
from autosched.deploy.artifact import MANIFEST, read_manifest
from tests.deploy.test_artifact import doctored

pytest.importorskip("onnx")


@pytest.fixture
def compiled_artifact(mlp_artifact):
    """``autosched compile`` of a tiny MLP from a database with one schedule per task (built once per session)."""
    return mlp_artifact


def test_compile_writes_one_artifact_and_run_times_it(compiled_artifact, capsys):
    assert compiled_artifact["code"] == 0 and zipfile.is_zipfile(compiled_artifact["path"])
    assert read_manifest(compiled_artifact["path"])["provenance"]["counts"] == {"tuned": 2}
    assert main(["run", str(compiled_artifact["path"]), "--threads", "1", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "autosched (artifact)" in out and "2x8 float32" in out and "fusion groups: 2 tuned" in out
    assert f"schedules from {compiled_artifact['db']}" in " ".join(out.split())


def test_compile_to_a_folder_and_to_a_bare_library(compiled_artifact, tmp_path, capsys):
    common = [str(compiled_artifact["model"]), "--input", "x:2x16", "--threads", "1", "--db",
              str(compiled_artifact["db"])]
    assert main(["compile", *common, "-o", str(tmp_path / "folder") + "/"]) == 0
    assert (tmp_path / "folder" / MANIFEST).is_file() and (tmp_path / "folder" / "model.so").is_file()
    assert main(["run", str(tmp_path / "folder"), "--threads", "1", "--repeat", "1"]) == 0
    assert main(["compile", *common, "-o", str(tmp_path / "mlp.so")]) == 0  # a .so: the library, as before
    assert (tmp_path / "mlp.so").is_file() and (tmp_path / "mlp.so.json").is_file()
    assert not zipfile.is_zipfile(tmp_path / "mlp.so")


@pytest.mark.parametrize("content", [b"garbage" * 100, b""], ids=["garbage", "empty"])
def test_running_a_corrupt_artifact_is_one_line_exit_2(content, tmp_path, capsys):
    path = tmp_path / "broken.autosched"
    path.write_bytes(content)
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("autosched: error:") and "not an autosched artifact" in err


def test_running_an_artifact_of_another_tvm_release_is_one_line_exit_2(compiled_artifact, tmp_path, capsys):
    path = doctored(compiled_artifact["path"], tmp_path, lambda manifest: manifest["versions"].update(tvm="0.18.0"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "built with TVM 0.18.0" in err


def test_run_of_a_model_still_needs_a_database_and_an_artifact_takes_none(compiled_artifact, capsys):
    assert main(["run", str(compiled_artifact["model"]), "--input", "x:2x16"]) == 2
    assert "needs --db DB" in capsys.readouterr().err
    assert main(["run", str(compiled_artifact["path"]), "--db", str(compiled_artifact["db"])]) == 2
    assert "--db: not for an artifact" in capsys.readouterr().err


@pytest.mark.parametrize("change,message", [
    (lambda m: m.update(versions=[]), "'versions' is list, not dict"),
    (lambda m: m.update(library="../outside.so"), "not a file name inside the artifact"),
    (lambda m: m.update(target={"json": "[" * 5000 + "]" * 5000}), "nests deeper than"),
])
def test_running_a_hostile_artifact_is_one_line_exit_2_and_writes_nothing(compiled_artifact, tmp_path, capsys,
                                                                          change, message):
    path = doctored(compiled_artifact["path"], tmp_path, change)
    before = sorted(tmp_path.rglob("*"))
    assert main(["--log", str(compiled_artifact["tmp"] / "log"), "run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("autosched: error:") and message in err, err
    assert sorted(tmp_path.rglob("*")) == before
