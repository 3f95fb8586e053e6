"""Models with symbolic dimensions: buckets parsed and picked, tasks merged across buckets, inputs of any
size served (exact bucket, a filled size with a bucket's schedules refitted, padded into a larger one where that
is exact, an exact build otherwise), checked against ONNX Runtime; the CLI tunes, compiles and reloads them;
bad input is one line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_graphs import _f32, _model, mlp

from autosched.api import compile as compile_model_api
from autosched.api import extract_model_tasks
from autosched.cli import main
from autosched.db import open_database
from autosched.deploy.buckets import (
    UntunedSizeWarning,
    check_inputs,
    fill_sizes,
    merge_bucket_tasks,
    output_axes,
    parse_shape_buckets,
    pick_buckets,
    symbolic_inputs,
    tile_friendly,
)
from autosched.deploy.library import load_compiled
from autosched.deploy.reference import max_relative_error
from autosched.errors import UserInputError
from autosched.graph.frontends import InputSpec

ort = pytest.importorskip("onnxruntime")


def attention(causal: bool, d: int = 8):
    """One self-attention head over x [1, seq, d]; causal: a position sees only itself and earlier ones
    (a lower-triangular mask built from the input's shape, as exporters write it)."""
    inits = {"Wq": _f32(d, d, scale=0.5), "Wk": _f32(d, d, scale=0.5), "Wv": _f32(d, d, scale=0.5),
             "scale": np.array(1 / np.sqrt(d), np.float32), "one": np.array([1], np.int64),
             "neg": np.array(-1e9, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", w], [n]) for w, n in (("Wq", "q"), ("Wk", "k"), ("Wv", "v"))]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Mul", ["qk", "scale"], ["s"])]
    if causal:
        nodes += [helper.make_node("Shape", ["x"], ["shape"]),
                  helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
                  helper.make_node("Concat", ["n", "n"], ["nn"], axis=0),
                  helper.make_node("ConstantOfShape", ["nn"], ["ones"],
                                   value=helper.make_tensor("v", TensorProto.BOOL, [1], [True])),
                  helper.make_node("Cast", ["ones"], ["ones_i"], to=TensorProto.INT64),
                  helper.make_node("Trilu", ["ones_i"], ["tri"], upper=0),
                  helper.make_node("Cast", ["tri"], ["mask"], to=TensorProto.BOOL),
                  helper.make_node("Where", ["mask", "s", "neg"], ["masked"])]
    nodes += [helper.make_node("Softmax", ["masked" if causal else "s"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", d])], inits)


def _ort(proto):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _check(model, session, sizes: list[int], name: str = "x", d: int = 8) -> None:
    for n in sizes:
        (x,) = check_inputs([InputSpec(name, (1, n, d), "float32")], seed=n)
        got = model(x)
        assert got[0].shape == (1, n, d)
        assert max_relative_error(got, session.run(None, {name: x})) < 1e-4, n


# --- parsing and picking ---------------------------------------------------------------------------------------
def test_buckets_are_parsed_given_or_picked():
    assert parse_shape_buckets(["seq=64,16,32"]) == {"seq": (16, 32, 64)}
    assert parse_shape_buckets(["seq=1..256"]) == {"seq": (16, 32, 64, 128, 256)}
    assert parse_shape_buckets(["batch=1,8;seq=8"]) == {"batch": (1, 8), "seq": (8,)}
    assert pick_buckets(100, 300) == (128, 256, 300)
    assert pick_buckets(1, 8) == (8,)
    assert pick_buckets(1, 16) == (16,)


@pytest.mark.parametrize("text", ["seq", "seq=", "seq=a,b", "seq=0,4", "seq=9..3", "=4"])
def test_bad_buckets_are_one_line_errors(text):
    with pytest.raises(UserInputError, match="--shape-buckets"):
        parse_shape_buckets([text])


def test_a_symbol_named_twice_is_refused():
    with pytest.raises(UserInputError, match="twice"):
        parse_shape_buckets(["seq=4", "seq=8"])


def test_symbols_are_checked_against_the_model(onnx_file):
    path = onnx_file(attention(causal=True), "att.onnx")
    with pytest.raises(UserInputError, match="no symbolic dimension 'len'.*seq"):
        symbolic_inputs(path, {"len": (4,)})
    with pytest.raises(UserInputError, match="'seq' have no buckets"):
        symbolic_inputs(path, {})
    with pytest.raises(UserInputError, match="ONNX model with symbolic dimensions"):
        symbolic_inputs(object(), {"seq": (4,)})


def test_output_axes_follow_the_symbol_and_refuse_other_dependences():
    outs = [({"seq": s}, [np.zeros((1, s, 8)), np.zeros((s * 2,))]) for s in (4, 8)]
    assert output_axes(outs) is None  # 2*seq cannot be sliced back
    outs = [({"seq": s}, [np.zeros((1, s, 8)), np.zeros((3,))]) for s in (4, 8)]
    assert output_axes(outs) == [{1: "seq"}, {}]


# --- tasks -------------------------------------------------------------------------------------------------------
def test_tasks_of_every_bucket_are_merged(onnx_file):
    path = onnx_file(mlp(batch="N"), "mlp.onnx")
    per_bucket = extract_model_tasks(path, "llvm", 1, shape_buckets={"N": (2, 4)})
    one = extract_model_tasks(path, "llvm", 1, shape_buckets={"N": (2,)})
    assert len(per_bucket) == 2 * len(one)  # every task's shapes depend on N here
    assert {t.name.split("@")[1] for t in per_bucket} == {"N=2", "N=4"}
    # a task structurally identical in two buckets is one task with the weights summed
    same = merge_bucket_tasks([({"N": 2}, one), ({"N": 3}, extract_model_tasks(path, "llvm", 1,
                                                                               shape_buckets={"N": (2,)}))])
    assert len(same) == len(one) and all(t.weight == 2 for t in same)
    assert same[0].info["buckets"] == ["N=2", "N=3"]


# --- serving ----------------------------------------------------------------------------------------------------
def test_causal_attention_pads_into_the_next_bucket(onnx_file):
    proto = attention(causal=True)
    model = compile_model_api(onnx_file(proto, "causal.onnx"), "llvm", n_threads=1, shape_buckets={"seq": (4, 8)})
    assert model.pads and "padding on" in model.pad_check
    assert [model.route({"seq": n}) for n in (1, 4, 5, 8, 9)] == [
        "padded to seq=4", "bucket", "padded to seq=8", "bucket", "untuned build"]
    session = _ort(proto)
    _check(model, session, [1, 2, 3, 4, 5, 7, 8])
    with pytest.warns(UntunedSizeWarning, match="seq=11 are beyond every bucket"):
        _check(model, session, [11])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check(model, session, [11])  # built once: no second warning


def test_attention_over_every_position_does_not_pad(onnx_file):
    proto = attention(causal=False)
    model = compile_model_api(onnx_file(proto, "full.onnx"), "llvm", n_threads=1, shape_buckets={"seq": (4, 8)})
    assert not model.pads and "padding off" in model.pad_check
    assert model.route({"seq": 6}) == "untuned build"
    session = _ort(proto)
    _check(model, session, [4, 8])
    with pytest.warns(UntunedSizeWarning, match="between buckets, and padding changes"):
        _check(model, session, [6])


def test_fill_sizes_bound_the_padding_on_a_grid_of_tile_friendly_sizes():
    assert fill_sizes((16, 32, 64, 128, 256), 1.25) == (1, 2, 4, 8, 12, 24, 40, 48, 56, 80, 96, 112, 160, 192, 224)
    assert not any(tile_friendly(n) for n in (3, 6, 20, 28, 36, 72, 88, 136, 168))  # odd parts of 9 or more, or 5+ x 4
    assert fill_sizes((16, 32, 64, 128, 256), 2) == (2, 4, 8)  # 17..32 pad into 32 by less than 2x already
    assert fill_sizes((4, 8), 1.25) == (1, 2)
    with pytest.raises(UserInputError, match="above 1"):
        fill_sizes((4, 8), 1.0)


def _tuned_and_compiled(onnx_file, tmp_path, causal: bool):
    """An attention model tuned at seq=4,8 (4 trials per task) and compiled with --max-padding 1.25."""
    from autosched.api import tune_model
    from autosched.config import TuneConfig

    proto = attention(causal=causal)
    path, db = onnx_file(proto, "attention.onnx"), str(tmp_path / "tuned.db")
    tune_model(path, "llvm", db, TuneConfig(n_trials=4, n_threads=1), shape_buckets={"seq": (4, 8)})
    model = compile_model_api(path, "llvm", db, n_threads=1, shape_buckets={"seq": (4, 8)}, max_padding=1.25)
    return proto, model


@pytest.mark.slow
def test_sizes_between_buckets_are_filled_with_the_buckets_schedules_refitted(onnx_file, tmp_path):
    proto, model = _tuned_and_compiled(onnx_file, tmp_path, causal=True)
    assert model.filled == {"seq=1": "seq=4", "seq=2": "seq=4"}
    assert [model.route({"seq": n}) for n in (1, 2, 3, 4, 5)] == [
        "filled from seq=4", "filled from seq=4", "padded to seq=4", "bucket", "padded to seq=8"]
    donor, counts = model.compiled["seq=4"].counts(), model.compiled["seq=2"].counts()
    assert donor["tuned"] > 0 and counts["transferred"] + counts["tuned"] + counts["default"] == donor["tuned"]
    assert counts["transferred"] > 0 and counts["default"] <= 1  # every one carries over where its design exists
    # here: a transpose whose best is the injective design (spaces/injective.py: its structure depends on the sizes)
    # gets its default schedule at a size where that design has another structure
    _check(model, _ort(proto), [1, 2, 3, 4, 5, 8])


@pytest.mark.slow
def test_a_size_padding_would_change_gets_an_exact_build_with_refitted_schedules(onnx_file, tmp_path):
    proto, model = _tuned_and_compiled(onnx_file, tmp_path, causal=False)
    assert not model.pads and not model.filled  # no padding: nothing to fill
    assert model.route({"seq": 6}) == "exact build, schedules of seq=8"
    with pytest.warns(UntunedSizeWarning, match="with the schedules of seq=8 refitted"):
        _check(model, _ort(proto), [6])
    donor, counts = model.compiled["seq=8"].counts(), model.exact["seq=6"].counts()
    assert counts["transferred"] > 0 and counts["transferred"] + counts["tuned"] + counts["default"] == donor["tuned"]
    assert counts["default"] <= 1  # as above: the injective design of the transpose may not carry over


def test_inputs_disagreeing_on_a_symbol_are_one_line_errors(onnx_file):
    model = compile_model_api(onnx_file(mlp(batch="N"), "mlp.onnx"), "llvm", n_threads=1, shape_buckets={"N": (2,)})
    with pytest.raises(UserInputError, match="rank 2"):
        model(np.zeros((2, 16, 1), np.float32))


# --- the command line ------------------------------------------------------------------------------------------
def test_cli_tunes_compiles_and_reloads_a_bucketed_model(onnx_file, tmp_path, capsys):
    proto = attention(causal=True)
    path, db = onnx_file(proto, "causal.onnx"), tmp_path / "dyn.db"
    buckets = ["--shape-buckets", "seq=4,8"]
    assert main(["tune", str(path), *buckets, "--trials", "2", "--threads", "1", "--db", str(db), "--quiet"]) == 0
    names = {row.name for row in open_database(str(db), create=False).tasks()}
    assert any(n.endswith("@seq=4") for n in names) and any(n.endswith("@seq=8") for n in names)
    lib = tmp_path / "lib" / "causal.so"
    assert main(["compile", str(path), *buckets, "--threads", "1", "--db", str(db), "-o", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "seq=4: " in out and "tuned" in out and "padding on" in out
    loaded = load_compiled(lib)
    assert sorted(loaded.compiled) == ["seq=4", "seq=8"] and loaded.pads
    _check(loaded, _ort(proto), [3, 8])
    with pytest.warns(UntunedSizeWarning):
        _check(loaded, _ort(proto), [10])  # built from the ONNX model written beside the libraries
    assert main(["run", str(path), *buckets, "--threads", "1", "--db", str(db), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("seq=3 ", "padded to seq=4", "seq=4 ", "seq=7 ", "padded to seq=8", "seq=8 "):
        assert row in out, row  # every bucket and a size between, timed beside ONNX Runtime
    assert "outputs match ONNX Runtime at every size" in out


def test_cli_refuses_buckets_without_a_model(tmp_path, capsys):
    assert main(["tune", "--op", "matmul", "--shape", "8,8,8", "--shape-buckets", "seq=4",
                 "--db", str(tmp_path / "x.db")]) == 2
    assert "--shape-buckets goes with a MODEL" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()


def test_cli_refuses_max_padding_without_buckets_or_at_most_one(onnx_file, tmp_path, capsys):
    path = onnx_file(attention(causal=True), "causal.onnx")
    db = tmp_path / "x.db"
    assert main(["tune", str(path), "--shape-buckets", "seq=4", "--trials", "1", "--threads", "1", "--db", str(db),
                 "--quiet"]) == 0
    assert main(["compile", str(path), "--input", "x:1x4x8", "--max-padding", "1.25", "--threads", "1",
                 "--db", str(db), "-o", str(tmp_path / "m.so")]) == 2
    assert "--max-padding goes with --shape-buckets" in capsys.readouterr().err
    assert main(["compile", str(path), "--shape-buckets", "seq=4", "--max-padding", "1", "--threads", "1",
                 "--db", str(db), "-o", str(tmp_path / "m.so")]) == 2
    assert "give a ratio above 1" in capsys.readouterr().err
    assert not (tmp_path / "m.so").exists()
