"""Property-based tests: malformed values for every CLI argument, config field, search-space TOML and model file
give one line and exit code 2 (or a clean run), never a traceback or an internal error.

The tuning commands get a --db that is a folder: whatever the fuzzed value, nothing can be tuned or written, and
a value that happens to be valid ends at the database check (one line, exit 2) after every other check ran.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.cli import main
from autosched.config import TuneConfig
from autosched.errors import UserInputError

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SEEN = {"inputs": 0, "tracebacks": 0}  # reported by the last test of this file


def _cli(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    SEEN["inputs"] += 1
    return code, err.getvalue()


def _assert_one_line_exit_2(code: int, err: str, allow_ok: bool = False) -> None:
    if "Traceback" in err or "internal error" in err:
        SEEN["tracebacks"] += 1
    assert "Traceback" not in err and "internal error" not in err, err
    if allow_ok and code == 0:
        return
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("autosched: error:"), err


# Text an argv can hold (no NUL), biased towards what breaks parsers: signs, dots, units, separators, JSON.
_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=24)
_numberish = st.one_of(_text, st.integers(-2**70, 0).map(str), st.integers(2**31, 2**70).map(str),
                       st.sampled_from(["nan", "inf", "-inf", "1e9999", "0x10", "1.5", "-1", "", " ", "1_0", "٣"]))
_shapeish = st.one_of(_text, st.lists(st.one_of(st.integers(-5, 0), st.integers(2**31, 2**64), st.just("x")),
                                      min_size=1, max_size=8).map(lambda v: ",".join(map(str, v))))
_targetish = st.one_of(_text, _text.map(lambda t: "llvm -mcpu=" + t), _text.map(lambda t: '{"kind": ' + t + "}"),
                       st.sampled_from(["cuda", "c", "{}", "[]", "null", '{"kind": "llvm", "num-cores": -3}',
                                        '{"kind": "llvm", "mcpu": 5}', "llvm -num-cores=abc"]))
_durationish = st.one_of(_text, st.sampled_from(["0", "-5s", "1e400", "nan", "10x", "1.5.5h", "s", "m10", "0.0m"]))

TUNE_ARGS = {
    "--op": _text, "--shape": _shapeish, "--target": _targetish, "--trials": _numberish, "--time": _durationish,
    "--sampler": _text, "--seed": _numberish, "--threads": _numberish, "--batch": _numberish,
    "--cost-model": _text, "--transfer-model": _text, "--input": _text, "--func": _text,
}


@pytest.fixture(scope="module")
def folder_db(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("db_is_a_folder"))


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("log") / "autosched.log")


@pytest.mark.parametrize("flag", list(TUNE_ARGS))
def test_every_tune_flag(flag, folder_db, log):
    base = ["--op", "matmul", "--shape", "8,8,8", "--cost-model", "none"]
    if flag in ("--input", "--func"):
        base = ["--cost-model", "none"] if flag == "--func" else ["zoo:no_such_model"]

    @FUZZ
    @given(value=TUNE_ARGS[flag])
    def check(value):
        argv = [a for i, a in enumerate(base) if a != flag and (i == 0 or base[i - 1] != flag)]
        _assert_one_line_exit_2(*_cli(["--log", log, "tune", *argv, f"{flag}={value}", "--db", folder_db]))

    check()


@FUZZ
@given(model=st.one_of(_text, _text.map(lambda t: "zoo:" + t), _text.map(lambda t: "corpus:" + t)))
def test_the_model_argument_of_every_model_command(model, folder_db, log, tmp_path_factory):
    out = str(tmp_path_factory.getbasetemp() / "never.so")
    for command, extra in (("tune", ["--db", folder_db]), ("inspect", []), ("compile", ["--db", folder_db, "-o", out]),
                           ("run", ["--db", folder_db])):
        _assert_one_line_exit_2(*_cli(["--log", log, command, f"{model}" if model[:1] != "-" else f"./{model}",
                                       *extra]))


@FUZZ
@given(flag=st.sampled_from(["--threads", "--repeat", "--seed", "--tolerance", "--target", "--input"]),
       value=st.one_of(_numberish, _targetish))
def test_every_run_compile_inspect_flag(flag, value, folder_db, log, tmp_path_factory):
    out = str(tmp_path_factory.getbasetemp() / "never.so")
    for command, extra in (("run", ["--db", folder_db]), ("compile", ["--db", folder_db, "-o", out]),
                           ("inspect", [])):
        if flag in ("--repeat", "--seed", "--tolerance") and command != "run":
            continue
        # a model that does not exist: every flag is checked before (or instead of) loading it
        _assert_one_line_exit_2(*_cli(["--log", log, command, "missing.onnx", f"{flag}={value}", *extra]))


@FUZZ
@given(db=st.one_of(_text, _text.map(lambda t: "sqlite:///" + t), _text.map(lambda t: "postgresql://" + t),
                    _text.map(lambda t: t + "://x"), st.sampled_from(["", "/", ".", "/dev/null", "/proc/self/mem"])))
def test_the_db_argument_of_show_export_and_report(db, log, tmp_path_factory):
    out = tmp_path_factory.getbasetemp() / "never.json"
    for command, extra in (("show", []), ("export", ["-o", str(out)]), ("report", ["-o", str(out)])):
        _assert_one_line_exit_2(*_cli(["--log", log, command, f"--db={db}", *extra]))
    assert not out.exists()


# --- config files -------------------------------------------------------------------------------------------------
_FIELDS = {f: getattr(TuneConfig(), f) for f in TuneConfig.__dataclass_fields__}
_toml_values = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True), st.booleans(), _text,
                         st.lists(st.integers(), max_size=3), st.dictionaries(st.sampled_from("ab"), st.integers(),
                                                                              max_size=2))


def _bad_for(name: str):
    """Values the field ``name`` must refuse: another type, or outside its range."""
    default = _FIELDS[name]
    if isinstance(default, bool) or default is None:  # None: a switch left unset (flush_cache)
        return st.one_of(st.integers(), _text, st.floats())
    if isinstance(default, str):
        return st.one_of(st.integers(), st.floats(), st.booleans(), st.lists(st.integers(), max_size=2))
    wrong_type = st.one_of(_text, st.booleans(), st.lists(st.integers(), max_size=2), st.floats(allow_nan=True)
                           .filter(lambda v: not math.isfinite(v)))
    return st.one_of(wrong_type, st.integers(-2**63, -1), st.floats(-1e300, -1e-9)) if not isinstance(default, int) \
        else st.one_of(wrong_type, st.integers(-2**63, -1), st.floats(-1e3, 1e3))


@pytest.mark.parametrize("name", list(_FIELDS))
def test_every_config_field_refuses_malformed_values(name):
    @settings(max_examples=25, deadline=None)
    @given(value=_bad_for(name))
    def check(value):
        SEEN["inputs"] += 1
        with pytest.raises(UserInputError) as info:
            TuneConfig(**{name: value})
        assert len(str(info.value).splitlines()) == 1

    check()


def _toml_line(key: str, value) -> str:
    import json

    if isinstance(value, bool):
        return f"{key} = {str(value).lower()}"
    if isinstance(value, float):
        text = "nan" if value != value else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
        return f"{key} = {text}"
    if isinstance(value, dict):
        return f"{key} = {{ {', '.join(f'{k} = {v}' for k, v in value.items())} }}"
    return f"{key} = {json.dumps(value)}"


@FUZZ
@given(entries=st.dictionaries(st.one_of(st.sampled_from(list(_FIELDS)), st.from_regex(r"[a-z_]{1,12}",
                                                                                       fullmatch=True)),
                               _toml_values, min_size=1, max_size=4),
       header=st.sampled_from(["[tune]\n", "", "[other]\n"]), garbage=st.one_of(st.just(""), _text))
def test_config_files_with_malformed_fields_or_text(entries, header, garbage, folder_db, log, tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "fuzz.toml"
    path.write_text(header + "\n".join(_toml_line(k, v) for k, v in entries.items()) + "\n" + garbage,
                    encoding="utf-8")
    argv = ["--log", log, "tune", "--op", "matmul", "--shape", "8,8,8", "--config", str(path), "--db", folder_db]
    _assert_one_line_exit_2(*_cli(argv))


# --- search-space TOML --------------------------------------------------------------------------------------------
CPU_TOML = Path(__file__).resolve().parents[1] / "search_spaces" / "cpu.toml"


def _dump(table: dict, prefix: str = "") -> str:
    """A small TOML writer (tomllib reads only): scalars first, then sub-tables, arrays of tables."""
    lines, subs = [], []
    for k, v in table.items():
        if isinstance(v, dict):
            subs.append(f"\n[{prefix}{k}]\n" + _dump(v, f"{prefix}{k}."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            subs.extend(f"\n[[{prefix}{k}]]\n" + _dump(x, f"{prefix}{k}.") for x in v)
        else:
            lines.append(_toml_line(k, v))
    return "\n".join(lines) + "\n" + "".join(subs)


@FUZZ
@given(data=st.data())
def test_search_space_files_with_malformed_fields(data, tmp_path_factory):
    from autosched.spaces.settings import load_settings

    table = tomllib.loads(CPU_TOML.read_text())
    keys = sorted(table)
    key = data.draw(st.sampled_from(keys))
    action = data.draw(st.sampled_from(["drop", "retype", "garbage"]))
    if action == "drop":
        del table[key]
    elif action == "retype":
        table[key] = data.draw(_toml_values)
    path = tmp_path_factory.getbasetemp() / "space.toml"
    text = _dump(table) if action != "garbage" else data.draw(_text) + "\n" + _dump(table)
    path.write_text(text, encoding="utf-8")
    SEEN["inputs"] += 1
    try:
        load_settings(path)
    except UserInputError as err:
        assert len(str(err).splitlines()) == 1
    # else: the change happened to leave a valid file (e.g. an optional key dropped)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_a_search_space_version_that_is_not_a_finite_number_is_a_one_line_error(value, tmp_path):
    # found by the fuzz test above: int(inf) raised a bare OverflowError
    from autosched.spaces.settings import load_settings

    path = tmp_path / "space.toml"
    path.write_text(CPU_TOML.read_text().replace("version = 2", f"version = {value}", 1), encoding="utf-8")
    with pytest.raises(UserInputError) as info:
        load_settings(path)
    assert len(str(info.value).splitlines()) == 1 and "wrong type" in str(info.value)


# --- model files --------------------------------------------------------------------------------------------------
def _tiny_onnx(op_type: str = "Relu", dim=2) -> bytes:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node(op_type, ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _check_onnx_bytes(data, log, tmp_path_factory, ways):
    model = _tiny_onnx()
    how = data.draw(st.sampled_from(ways))
    if how == "truncate":
        blob = model[: data.draw(st.integers(0, len(model) - 1))]
    elif how == "flip":
        i = data.draw(st.integers(0, len(model) - 1))
        blob = model[:i] + bytes([model[i] ^ data.draw(st.integers(1, 255))]) + model[i + 1:]
    else:
        blob = data.draw(st.binary(max_size=256))
    path = tmp_path_factory.getbasetemp() / "fuzz.onnx"
    path.write_bytes(blob)
    _assert_one_line_exit_2(*_cli(["--log", log, "inspect", str(path), "--threads", "1"]), allow_ok=True)


@FUZZ
@given(data=st.data())
def test_truncated_and_random_onnx_files(data, log, tmp_path_factory):
    _check_onnx_bytes(data, log, tmp_path_factory, ["truncate", "random"])


@FUZZ
@given(data=st.data())
def test_bit_flipped_onnx_files(data, log, tmp_path_factory):
    _check_onnx_bytes(data, log, tmp_path_factory, ["flip"])


def test_an_onnx_input_without_a_dtype(log, tmp_path):
    onnx = pytest.importorskip("onnx")
    proto = onnx.load_from_string(_tiny_onnx())
    proto.graph.input[0].type.tensor_type.elem_type = 0
    path = tmp_path / "no_dtype.onnx"
    path.write_bytes(proto.SerializeToString())
    _assert_one_line_exit_2(*_cli(["--log", log, "inspect", str(path), "--threads", "1"]))


@FUZZ
@given(op=st.one_of(st.from_regex(r"[A-Z][A-Za-z]{2,14}", fullmatch=True),
                    st.sampled_from(["Celu", "Loop", "If", "Scan", "NonMaxSuppression", "StringNormalizer"])))
def test_onnx_files_with_unsupported_operators(op, log, tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "op.onnx"
    path.write_bytes(_tiny_onnx(op))
    _assert_one_line_exit_2(*_cli(["--log", log, "inspect", str(path), "--threads", "1"]), allow_ok=True)


@FUZZ
@given(dim=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
       given_input=st.one_of(st.none(), _text, st.from_regex(r"x:[0-9x-]{0,8}", fullmatch=True)))
def test_dynamic_dimensions_without_values(dim, given_input, log, tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "dyn.onnx"
    path.write_bytes(_tiny_onnx("Relu", dim))
    extra = [] if given_input is None else [f"--input={given_input}"]
    _assert_one_line_exit_2(*_cli(["--log", log, "inspect", str(path), "--threads", "1", *extra]), allow_ok=True)


# --- hostile files: configs, JSON-lines exports, artifacts, --target JSON (issue 62) -------------------------------
# Each file kind gets the same seeded variants of one valid example, a fixed count per mutation kind; every variant
# goes through the CLI in-process and must end in one line and exit code 2, or in success where it is still valid.
HOSTILE_KINDS = ("truncated", "random bytes", "wrong type", "deep nesting", "huge number", "empty container",
                 "unicode", "NUL byte")
PER_KIND = 10  # variants per mutation kind ("wrong type": one per key of the example, up to WRONG_TYPE_KEYS)
WRONG_TYPE_KEYS = 40
HOSTILE_SEEN: Counter = Counter()  # (file kind, mutation kind) -> inputs tried, reported by the last test
_HOLE = "\x01HOLE\x01"  # stands for the raw text put at a chosen key (json.dumps writes it "\\u0001HOLE\\u0001")
_WRONG_JSON = ["null", "true", "0", "-1", "1.5", '""', '"x"', "[]", "{}", '[1, "a"]', '{"a": null}']
_WRONG_TOML = ["true", "0", "-1", "1.5", '""', '"x"', "[]", "{}", '[1, "a"]', "{ a = 1 }"]


def _key_paths(value, prefix=()):
    """Every key (dict) and index (list) path of a parsed value, the value itself first."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield from _key_paths(v, (*prefix, k))


def _with(value, path, new):
    import copy

    value = copy.deepcopy(value)
    if not path:
        return new
    inner = value
    for k in path[:-1]:
        inner = inner[k]
    inner[path[-1]] = new
    return value


def _raw_for(kind: str, rng, toml: bool) -> str:
    """The raw text a mutation kind puts at one key (JSON or TOML syntax)."""
    depth = rng.choice([65, 300, 1000, 5000, 50_000])
    if kind == "deep nesting":
        if toml:
            return rng.choice(["[" * depth + "]" * depth, "{ a = " * min(depth, 3000) + "1" + " }" * min(depth, 3000)])
        return rng.choice(["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth])
    if kind == "huge number":
        return rng.choice(["1" + "0" * rng.choice([20, 400, 5000]), "1e400", "-1e400", str(2**64), "-" + str(2**63 + 1),
                           "1e-400"] + ([] if toml else ["NaN", "Infinity"]))
    if kind == "empty container":
        return rng.choice(["[]", "{}", '""'])
    if kind == "unicode":
        return rng.choice(['"\\ud800"', '"\\u202eevil"', '"\\u2028x\\u2029"', '"\u00e9\u20ac\U0001F600"',
                           '"' + "\u00e9" * 2000 + '"'])
    if kind == "NUL byte":
        return '"a\\u0000b"'
    return rng.choice(_WRONG_TOML if toml else _WRONG_JSON)  # wrong type


def hostile_variants(valid, dump, rng, toml: bool = False, argv: bool = False, levels: tuple[int, int] = (1, 99)):
    """(mutation kind, bytes) pairs: ``PER_KIND`` of each kind (``dump(value)`` writes a parsed value as text), one
    wrong type per key. ``argv``: text an argument can hold (no NUL byte: it goes in as a JSON escape). ``levels``:
    the lowest and highest nesting level of the keys whose values are replaced (1: the top-level ones)."""
    text = dump(valid).encode()
    paths = [p for p in _key_paths(valid) if levels[0] <= len(p) <= levels[1]][:WRONG_TYPE_KEYS]
    for kind in HOSTILE_KINDS:
        for i in range(len(paths) if kind == "wrong type" else PER_KIND):
            if kind == "truncated":
                blob = text[: rng.randrange(len(text))]
            elif kind == "random bytes":
                blob = rng.randbytes(rng.randrange(1, 300))
                if argv:
                    blob = blob.replace(b"\x00", b"").decode("latin-1").encode()
            elif kind == "NUL byte" and i % 2 and not argv:  # half: a NUL byte anywhere in the file
                at = rng.randrange(len(text))
                blob = text[:at] + b"\x00" + text[at:]
            else:
                path = paths[i] if kind == "wrong type" else rng.choice(paths)
                raw = _raw_for(kind, rng, toml)
                blob = dump(_with(valid, path, _HOLE)).replace(json.dumps(_HOLE), raw).encode("utf-8",
                                                                                             "surrogatepass")
            yield kind, blob


def _check_hostile(what: str, kind: str, code: int, err: str) -> None:
    HOSTILE_SEEN[what, kind] += 1
    _assert_one_line_exit_2(code, err, allow_ok=True)


def _toml_dump(table: dict) -> str:
    return _dump(table)


def test_hostile_config_files(folder_db, log, tmp_path):
    import random

    valid = {"tune": {k: v for k, v in _FIELDS.items() if v is not None and k not in ("rpc", "rpc_key")}}
    path = tmp_path / "hostile.toml"
    for kind, blob in hostile_variants(valid, _toml_dump, random.Random(62), toml=True):
        path.write_bytes(blob)
        argv = ["--log", log, "tune", "--op", "matmul", "--shape", "8,8,8", "--config", str(path), "--db", folder_db]
        _check_hostile("config", kind, *_cli(argv))


@pytest.fixture(scope="module")
def valid_export(tmp_path_factory) -> list[dict]:
    from autosched.db import open_database
    from autosched.db.base import TaskRow
    from autosched.db.transfer import export_jsonl
    from autosched.records import Status, TuningRecord

    tmp = tmp_path_factory.mktemp("export")
    with open_database(str(tmp / "src.db")) as db:
        db.commit_task(TaskRow("k1", "matmul_8x8x8", '{"kind": "llvm"}', 1, "{}", 1024.0, {"op": "matmul"}))
        db.commit([TuningRecord("k1", '{"kind": "llvm"}', {"a": 1}, [[1, 2], 0.5], [["inst"], []], Status.OK,
                                [0.5] * 3, None, "0.1.0", "0.27", 1)])
        export_jsonl(db, tmp / "x.jsonl")
    return [json.loads(line) for line in (tmp / "x.jsonl").read_text().splitlines()]


def _import_variants(valid_export, log, tmp_path, what: str, levels: tuple[int, int]) -> None:
    import random

    def dump(lines):
        return "\n".join(json.dumps(line) for line in lines) + "\n"

    path = tmp_path / "hostile.jsonl"
    for n, (kind, blob) in enumerate(hostile_variants(valid_export, dump, random.Random(62), levels=levels)):
        path.write_bytes(blob)
        db = tmp_path / f"into{n}.db"
        code, err = _cli(["--log", log, "import", str(path), "--db", str(db)])
        _check_hostile(what, kind, code, err)
        assert code == 0 or not db.exists()  # refused: the database is not even created


def test_hostile_json_lines_exports(valid_export, log, tmp_path):
    """The file and its lines: truncated, random bytes, NUL bytes, and whole lines replaced (deep, huge, empty,
    unicode, of another type)."""
    _import_variants(valid_export, log, tmp_path, "JSON-lines export", (1, 1))


def test_hostile_fields_of_json_lines_exports(valid_export, log, tmp_path):
    """A wrong type at every field of a task line and a record line: each import refused in one line, nothing
    written (``TuningRecord.from_json`` and ``transfer._checked_task`` check them)."""
    _import_variants(valid_export, log, tmp_path, "JSON-lines export fields", (2, 99))


def test_a_json_lines_line_longer_than_the_cap_is_one_line(valid_export, log, tmp_path, monkeypatch):
    import autosched.db.transfer as transfer

    monkeypatch.setattr(transfer, "LINE_MAX_CHARS", 1000)  # the real cap is 64 MiB: the same check, smaller
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(valid_export[0]) + "\n" + json.dumps({"pad": "x" * 5000}) + "\n")
    code, err = _cli(["--log", log, "import", str(path), "--db", str(tmp_path / "never.db")])
    _assert_one_line_exit_2(code, err)
    assert "has a line longer than 1000 bytes" in err and not (tmp_path / "never.db").exists()


def test_hostile_target_json(folder_db, log):
    import random

    valid = {"kind": "llvm", "mcpu": "x86-64", "num-cores": 1, "mattr": ["+avx2"]}
    for kind, blob in hostile_variants(valid, json.dumps, random.Random(62), argv=True):
        target = blob.decode("utf-8", "surrogatepass").lstrip() or "{"
        target = target if target.startswith("{") else "{" + target  # a JSON dict, as --target reads one
        argv = ["--log", log, "tune", "--op", "matmul", "--shape", "8,8,8", "--cost-model", "none",
                f"--target={target}", "--db", folder_db]
        _check_hostile("--target JSON", kind, *_cli(argv))


@pytest.fixture
def artifact(mlp_artifact) -> Path:
    """A real artifact of a tiny MLP (``autosched compile -o``), built once per session (tests/conftest.py)."""
    assert mlp_artifact["code"] == 0
    return mlp_artifact["path"]


@pytest.mark.parametrize("member", ["manifest.json", "model.so.json", "the zip file"])
def test_hostile_artifacts(artifact, member, log, tmp_path):
    import random
    import zipfile

    with zipfile.ZipFile(artifact) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    path = tmp_path / "hostile.autosched"
    if member == "the zip file":  # the container itself: truncated, random bytes, a byte flipped
        rng, whole = random.Random(62), artifact.read_bytes()
        for kind in ("truncated", "random bytes", "byte flipped"):
            for _ in range(PER_KIND):
                at = rng.randrange(len(whole))
                blob = {"truncated": whole[:at], "random bytes": rng.randbytes(rng.randrange(1, 300)),
                        "byte flipped": whole[:at] + bytes([whole[at] ^ rng.randrange(1, 256)]) + whole[at + 1:]}[kind]
                path.write_bytes(blob)
                _check_hostile(f"artifact ({member})", kind, *_cli(["--log", log, "run", str(path), "--threads", "1",
                                                                   "--repeat", "1"]))
        return
    valid = json.loads(files[member])
    for kind, blob in hostile_variants(valid, json.dumps, random.Random(62)):
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in files.items():
                zf.writestr(name, blob if name == member else data)
        _check_hostile(f"artifact ({member})", kind, *_cli(["--log", log, "run", str(path), "--threads", "1",
                                                           "--repeat", "1"]))


def test_zz_hostile_file_counts(capsys):
    """How many variants of each kind each hostile-file test tried (run this file with -s to see them)."""
    by_file: dict[str, dict[str, int]] = {}
    for (what, kind), n in sorted(HOSTILE_SEEN.items()):
        by_file.setdefault(what, {})[kind] = n
    with capsys.disabled():
        for what, kinds in by_file.items():
            print(f"\nhostile {what}: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()))
    if by_file:  # the tests above ran (not deselected): each kind had its full count
        assert all(n == PER_KIND for (what, kind), n in HOSTILE_SEEN.items() if kind != "wrong type")
        assert SEEN["tracebacks"] == 0


def test_zz_report_the_figures(capsys):
    """Not a check: prints how many fuzzed inputs the tests above tried (run the file on its own to see it)."""
    with capsys.disabled():
        print(f"\nfuzzed inputs tried: {SEEN['inputs']}, tracebacks seen: {SEEN['tracebacks']}")
    assert SEEN["tracebacks"] == 0
