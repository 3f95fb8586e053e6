"""A tuned model as one artifact: written as a zip file or a folder, loaded back as a callable; refused, in one line,
on a host that lacks its target's CPU features or with another TVM release; garbage is one line too."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from onnx_graphs import mlp
from tuned_records import record_one_schedule_per_task

import autosched
from autosched._tvm import TVM_VERSION, host_cpu, host_isa
from autosched.db import open_database
from autosched.deploy.artifact import MANIFEST, build_manifest, load_artifact, read_manifest, save_artifact
from autosched.errors import IncompatibleArtefactError, UserInputError
from autosched.graph.frontends import load_model
from autosched.tasks import make_target

pytest.importorskip("onnx")

# Extensions a target may ask for, most exotic first: the first this host lacks makes the doctored artifact
EXOTIC = ("amx-tile", "amx-bf16", "avx512fp16", "avx512bf16", "avxvnni", "avx512vnni", "avx512f", "avx2")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tiny MLP (2x16 -> 8) built once from a database holding one schedule per task, saved as a zip file and
    as a folder."""
    tmp = tmp_path_factory.mktemp("artifact")
    import onnx

    onnx.save(mlp(), str(tmp / "mlp.onnx"))
    model = load_model(str(tmp / "mlp.onnx"), {"x": (2, 16)})
    target = make_target("llvm", 1)
    db_path = str(tmp / "tuned.db")
    with open_database(db_path) as db:
        record_one_schedule_per_task(model, target, db)
        compiled = autosched.compile(model, target, db)
        zipped = save_artifact(compiled, tmp / "mlp.autosched", db, ["autosched", "compile"], db_path)
        folder = save_artifact(compiled, str(tmp / "mlp_folder") + "/", db, db_name=db_path)
    return {"compiled": compiled, "model": model, "zip": zipped, "folder": folder, "db": db_path, "tmp": tmp}


def test_a_zip_artifact_loads_back_as_a_callable_with_the_same_outputs(built):
    x = built["model"].random_inputs(3)
    loaded = autosched.load(str(built["zip"]))
    got = loaded(*x)
    assert isinstance(got[0], np.ndarray) and got[0].shape == (2, 8)
    np.testing.assert_allclose(got[0], built["compiled"](*x)[0], rtol=1e-6)
    assert zipfile.ZipFile(built["zip"]).namelist() == [MANIFEST, "model.so", "model.so.json"]


def test_the_manifest_holds_signature_target_versions_and_provenance(built):
    m = read_manifest(built["zip"])
    assert m["signature"] == {"inputs": [{"name": "x", "shape": [2, 16], "dtype": "float32"}],
                              "outputs": [{"name": "y", "shape": [2, 8], "dtype": "float32"}]}
    assert m["target"]["json"] == built["compiled"].target and m["target"]["mcpu"] == host_cpu()
    assert m["target"]["num_cores"] == 1 and isinstance(m["target"]["mattr"], list)
    assert ("avx2" in m["target"]["features"]) == bool(host_isa().get("avx2"))  # what this CPU's target may use
    assert m["versions"]["tvm"] == TVM_VERSION and m["versions"]["autosched"] == autosched.__version__
    assert m["versions"]["python"].count(".") == 2
    prov = m["provenance"]
    assert prov["database"] == built["db"] and prov["command"] == ["autosched", "compile"]
    assert prov["counts"] == {"tuned": 2} and len(prov["groups"]) == 2
    for group in prov["groups"]:
        assert group["schedule"] == "tuned" and group["records"] == 1 and group["newest_record_at"].endswith("+00:00")
        assert len(group["task_key"]) == 20


def test_a_folder_artifact_is_written_where_the_path_ends_in_a_slash_or_is_a_folder(built, tmp_path):
    folder = built["folder"]
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "model.so", "model.so.json"]
    x = built["model"].random_inputs(0)
    np.testing.assert_allclose(autosched.load(str(folder))(*x)[0], built["compiled"](*x)[0], rtol=1e-6)
    existing = tmp_path / "existing"
    existing.mkdir()
    save_artifact(built["compiled"], existing)  # an existing folder, no slash: a folder too
    assert (existing / MANIFEST).is_file() and read_manifest(existing)["provenance"]["database"] is None


def test_a_bare_library_still_loads_through_load(built, tmp_path):
    lib = built["compiled"].export_library(tmp_path / "mlp.so")
    x = built["model"].random_inputs(1)
    np.testing.assert_allclose(autosched.load(str(lib))(*x)[0], built["compiled"](*x)[0], rtol=1e-6)
    assert autosched.load_compiled(str(lib)).outputs[0].name == "y"


def test_the_database_password_is_not_in_the_provenance(built):
    url = "postgresql://tuner:s3cret@db.example/tuning"
    manifest = build_manifest(built["compiled"], url, ["autosched", "compile", "--db", url, f"--db={url}"])
    assert "s3cret" not in json.dumps(manifest) and "tuner:***@db.example" in manifest["provenance"]["database"]
    assert manifest["provenance"]["command"][3:] == ["postgresql://tuner:***@db.example/tuning",
                                                     "--db=postgresql://tuner:***@db.example/tuning"]


def doctored(artifact, tmp_path, change) -> str:
    """A copy of the zip artifact at ``artifact`` with ``change(manifest)`` applied to its manifest."""
    path = tmp_path / "doctored.autosched"
    with zipfile.ZipFile(artifact) as src, zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == MANIFEST:
                manifest = json.loads(data)
                change(manifest)
                data = json.dumps(manifest).encode()
            dst.writestr(name, data)
    return str(path)


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_host_without_a_feature_the_target_uses_is_refused(built, tmp_path):
    """Constructed from this host's own features (they change between machines): the target asks for the first of
    ``EXOTIC`` this CPU lacks."""
    isa = host_isa()
    lacking = next((f for f in EXOTIC if isa.get(f) is False), None)
    if lacking is None:
        pytest.skip(f"this CPU has every one of {', '.join(EXOTIC)}")

    def ask_for_it(manifest):
        target = json.loads(manifest["target"]["json"])
        target["mattr"] = [a for a in target.get("mattr", []) if a.lstrip("+-") != lacking] + [f"+{lacking}"]
        manifest["target"]["json"] = json.dumps(target, sort_keys=True)

    path = doctored(built["zip"], tmp_path, ask_for_it)
    with pytest.raises(UserInputError) as err:
        autosched.load(path)
    text = _one_line(err)
    assert "cannot run here" in text and lacking in text and "build with --target llvm" in text


def test_another_tvm_release_is_refused(built, tmp_path):
    def older(manifest):
        manifest["versions"]["tvm"] = "0.19.0"

    path = doctored(built["zip"], tmp_path, older)
    with pytest.raises(UserInputError) as err:
        load_artifact(path)
    text = _one_line(err)
    assert "built with TVM 0.19.0" in text and f"this runtime is TVM {TVM_VERSION}" in text and "rebuild" in text


def test_a_patch_release_of_the_same_tvm_loads(built, tmp_path):
    def patched(manifest):
        manifest["versions"]["tvm"] = ".".join(TVM_VERSION.split(".")[:2]) + ".99"

    x = built["model"].random_inputs(2)
    assert load_artifact(doctored(built["zip"], tmp_path, patched))(*x)[0].shape == (2, 8)


@pytest.mark.parametrize("kind,message", [
    ("garbage", "not a zip file"),
    ("zip without manifest", "without manifest.json"),
    ("not json", "is not JSON"),
    ("other format", "not an autosched artifact"),
    ("missing", "does not exist"),
    ("folder", "folder without manifest.json"),
])
def test_a_corrupt_artifact_is_one_line(kind, message, tmp_path):
    path = tmp_path / "bad.autosched"
    if kind == "garbage":
        path.write_bytes(b"\x7fELF not really" * 10)
    elif kind == "folder":
        path.mkdir()
    elif kind != "missing":
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("model.so" if kind == "zip without manifest" else MANIFEST,
                        {"not json": "{oops", "other format": '{"format": "x"}'}.get(kind, "x"))
    with pytest.raises(UserInputError) as err:
        autosched.load(str(path))
    assert message in _one_line(err) and "autosched compile" in str(err.value)


def test_an_artifact_of_another_schema_version_is_refused(built, tmp_path):
    def newer(manifest):
        manifest["schema_version"] = 99

    with pytest.raises(IncompatibleArtefactError, match="schema version 99"):
        load_artifact(doctored(built["zip"], tmp_path, newer))


def test_a_damaged_library_is_one_line(built, tmp_path):
    folder = tmp_path / "damaged"
    shutil.copytree(built["folder"], folder)
    (folder / "model.so").write_bytes(b"not a library")
    with pytest.raises(UserInputError):
        load_artifact(folder)


# --- hostile or broken artifacts (issue 62): one line, nothing loaded from outside, bounded reads ------------------
def _folder_copy(built, tmp_path, change=None) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(built["folder"], folder)
    if change is not None:
        manifest = json.loads((folder / MANIFEST).read_text())
        change(manifest)
        (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


def _set(key, value, inner=None):
    def change(manifest):
        if inner is None:
            manifest[key] = value
        else:
            manifest[key][inner] = value
    return change


@pytest.mark.parametrize("change,message", [
    (_set("versions", []), "'versions' is list, not dict"),
    (_set("versions", None), "'versions' is null or missing, not dict"),
    (_set("target", "llvm"), "'target' is str, not dict"),
    (_set("target", 5, "json"), "target.json is int, not str"),
    (_set("target", [1], "features"), "target.features holds a non-string"),
    (_set("provenance", []), "'provenance' is list"),
    (_set("versions", 7, "tvm"), "versions.tvm is int"),
    (lambda m: m.pop("target"), "has no 'target'"),
    (_set("schema_version", [1] * 1000), "schema version [1, 1, 1"),
    (_set("deep", json.loads("[" * 900 + "]" * 900)), "nests deeper than 64 levels"),
])
def test_a_manifest_with_a_field_of_the_wrong_type_is_one_line(built, tmp_path, change, message):
    with pytest.raises(UserInputError) as err:
        load_artifact(doctored(built["zip"], tmp_path, change))
    text = _one_line(err)
    assert message in text and "autosched compile" in text and len(text) < 400


def test_a_manifest_nested_past_the_json_parser_is_one_line(tmp_path):
    path = tmp_path / "deep.autosched"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(MANIFEST, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserInputError) as err:
        load_artifact(path)
    assert "nests deeper than" in _one_line(err)


def test_a_zip_bomb_manifest_is_refused_from_its_declared_size_before_it_is_read(tmp_path):
    import tracemalloc

    path = tmp_path / "bomb.autosched"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open(MANIFEST, "w") as f:  # 64 MiB of spaces, about 64 KiB compressed
            for _ in range(64):
                f.write(b" " * (1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(UserInputError) as err:
            read_manifest(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "manifest.json is larger than 1 MiB" in _one_line(err)
    assert peak < 4 << 20  # read whole, it took 64 MiB and more


@pytest.mark.parametrize("library", ["../outside.so", "/tmp/outside.so", "sub/model.so", "..", "", "a\\b.so", 5])
def test_a_library_named_outside_the_artifact_is_refused(built, tmp_path, library):
    # a library beside the folder artifact: loaded from ../outside.so, it would run code the artifact does not hold
    shutil.copy(built["folder"] / "model.so", tmp_path / "outside.so")
    shutil.copy(built["folder"] / "model.so.json", tmp_path / "outside.so.json")
    for path in (_folder_copy(built, tmp_path, _set("library", library)),
                 doctored(built["zip"], tmp_path, _set("library", library))):
        with pytest.raises(UserInputError) as err:
            load_artifact(path)
        text = _one_line(err)
        assert ("not a file name inside the artifact" in text or "'library' is int" in text), text


def test_a_symlink_out_of_a_folder_artifact_is_refused(built, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    folder = _folder_copy(built, tmp_path)
    for name in ("model.so", "model.so.json"):
        shutil.move(folder / name, outside / name)
        (folder / name).symlink_to(outside / name)
    with pytest.raises(UserInputError) as err:
        load_artifact(folder)
    assert "is a link to a file outside the artifact" in _one_line(err)
    (folder / MANIFEST).rename(outside / MANIFEST)
    (folder / MANIFEST).symlink_to(outside / MANIFEST)
    with pytest.raises(UserInputError, match="manifest.json is a link to a file outside"):
        read_manifest(folder)


@pytest.mark.parametrize("member", ["../evil.so", "/abs/evil.so", "a/../../evil", "c:evil", "x\\..\\evil"])
def test_zip_members_with_names_outside_the_artifact_are_refused(built, tmp_path, member):
    path = tmp_path / "members.autosched"
    shutil.copy(built["zip"], path)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(member, b"x")
    with pytest.raises(UserInputError) as err:
        load_artifact(path)
    assert "outside the artifact's folder" in _one_line(err)
    assert not (tmp_path.parent / "evil.so").exists()


def test_a_library_larger_than_its_cap_is_refused_before_it_is_extracted(built, tmp_path, monkeypatch):
    import autosched.deploy.artifact as artifact

    monkeypatch.setattr(artifact, "LIBRARY_MAX_BYTES", 1000)  # the real cap is 2 GiB: the same check, smaller
    with pytest.raises(UserInputError) as err:
        load_artifact(built["zip"])
    assert "its model.so is larger than" in _one_line(err)


@pytest.mark.parametrize("meta,message", [
    ({"buckets": {}}, "not one build's metadata"),
    ([], "not one build's metadata"),
    ({"target": "{}", "inputs": [["x", [2, 2**40], "float32"]]}, "not [name, shape, dtype]"),
    ({"target": "{}", "inputs": [["x", [2], "float99"]]}, "not [name, shape, dtype]"),
    ({"target": "{}", "inputs": 5}, "not [name, shape, dtype]"),
    ({"target": "{}", "inputs": [], "sources": []}, "'sources' is not a table"),
    ({"target": "{}", "inputs": [], "sources": {"g": [1]}}, "'sources' is not a table"),
])
def test_malformed_library_metadata_is_one_line(built, tmp_path, meta, message):
    folder = _folder_copy(built, tmp_path)
    (folder / "model.so.json").write_text(json.dumps(meta))
    with pytest.raises(UserInputError) as err:
        load_artifact(folder)
    assert message in _one_line(err)


def test_a_failed_zip_write_keeps_the_old_artifact_and_leaves_no_partial_file(built, tmp_path, monkeypatch):
    target = tmp_path / "mlp.autosched"
    shutil.copy(built["zip"], target)
    before = target.read_bytes()
    written = []

    def write_then_fail(self, filename, arcname=None, *args, **kwargs):
        if written:
            raise OSError(28, "No space left on device")
        written.append(arcname)
        return real_write(self, filename, arcname, *args, **kwargs)

    real_write = zipfile.ZipFile.write
    monkeypatch.setattr(zipfile.ZipFile, "write", write_then_fail)
    with pytest.raises(OSError, match="No space"):
        save_artifact(built["compiled"], target, built["db"])
    assert written and target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["mlp.autosched"]  # no mlp.autosched.partial
