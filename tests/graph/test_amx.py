"""bf16 matmuls against constant weights on AMX tiles: rewritten where the target has AMX bf16 and the extents fit,
never tuning tasks, left as tuned bf16 matmuls elsewhere; the build matches float32 on a CPU with AMX. Without AMX
but with AVX512-BF16 (Zen 4/5), bf16 ones become ``vdpbf16ps`` kernels the same way."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_graphs import _f32, _model, ffn_block

from autosched._tvm import IRModule, PrimFunc, arg_specs, tvm
from autosched.api import compile as compile_api
from autosched.codegen.x86_amx import BF16, INT8, has_amx
from autosched.codegen.x86_lowp import has_lowp_dense, lowp_dense, pack_lowp_weight
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.graph.amx import is_hand_kernel
from autosched.graph.frontends import load_model
from autosched.graph.passes import fusion_groups, rewrite
from autosched.graph.precision import with_precision
from autosched.targets import make_target, runs_here, why_not_here

pytest.importorskip("onnxruntime")

SAPPHIRE_RAPIDS = make_target('{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 1}')
SKYLAKE = make_target('{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}')
ZEN4 = make_target('{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}')  # AVX512-BF16, no AMX
HOST = make_target("llvm", 1)
avx512_bf16_here = pytest.mark.skipif(not has_lowp_dense(HOST, "bf16") or has_amx(HOST),
                                      reason="this CPU has no AVX512-BF16, or has AMX (which takes bf16 instead)")
vnni_here = pytest.mark.skipif(not has_lowp_dense(HOST, "int8") or has_amx(HOST, INT8),
                               reason="this CPU has no AVX512-VNNI, or has AMX (which takes int8 instead)")
amx_here = pytest.mark.skipif(not has_amx(HOST, BF16),
                              reason="this CPU has no AMX bf16 (or Linux refuses it)")
int8_amx_here = pytest.mark.skipif(not has_amx(HOST, INT8),
                                   reason="this CPU has no AMX int8 (or Linux refuses it)")


def conv_stack(size=10):
    """Conv 3x3 (32 -> 32, padded) -> Relu -> Conv 1x1 stride 2 (32 -> 64) -> Relu -> Conv 1x1 (64 -> 8): the
    first two fit AMX; the last makes the output (float32) and has 8 output channels."""
    inits = {"W1": _f32(32, 32, 3, 3), "W2": _f32(64, 32, 1, 1), "W3": _f32(8, 64, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], strides=[2, 2]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "W3"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, size, size])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, size // 2, size // 2])], inits)


def _fused_bf16(source, target, precision="bf16"):
    model = load_model(source)
    return rewrite(with_precision(model.mod, precision), target)


def _hand_kernels(fused) -> list[tuple[int, int, int]]:
    """(m, n, k) of every AMX (or AVX512-BF16) kernel the graph calls."""
    shapes = []
    for _, func in fused.functions_items():
        if isinstance(func, PrimFunc) and is_hand_kernel(func):
            (a, dtype), _, (c, _) = arg_specs(func)
            shapes.append((a[0], c[1], a[1]) if dtype == "bfloat16" else (a[0], c[1], a[1], dtype))
    return sorted(shapes)


def test_bf16_matmuls_with_constant_weights_become_amx_kernels_and_no_tasks():
    fused = _fused_bf16(ffn_block(seq=8, d=32, hidden=64), SAPPHIRE_RAPIDS)
    # 8 rows; both matmuls (the second feeds a residual add, so it is converted too)
    assert _hand_kernels(fused) == [(8, 32, 64), (8, 64, 32)]
    assert not any("matmul" in g.name for g in fusion_groups(fused))


def test_channels_last_convolutions_become_amx_kernels_on_their_patches():
    fused = _fused_bf16(conv_stack(), SAPPHIRE_RAPIDS)
    # 10 x 10 pixels by 9 taps x 32 channels; 5 x 5 pixels by 32 channels
    assert _hand_kernels(fused) == [(25, 64, 32), (100, 32, 288)]
    assert sum("conv" in g.name for g in fusion_groups(fused)) == 1  # the last (float32, 8 channels)


def test_without_amx_or_with_extents_it_cannot_take_the_tuned_bf16_matmuls_stay():
    for source, target in [(ffn_block(seq=8, d=32, hidden=64), SKYLAKE),
                           (ffn_block(seq=8, d=16, hidden=32), SAPPHIRE_RAPIDS)]:  # K = 16: no 32-deep tile
        fused = _fused_bf16(source, target)
        assert _hand_kernels(fused) == []
        assert sum("matmul" in g.name for g in fusion_groups(fused)) == 2


@amx_here
def test_an_amx_build_matches_float32(onnx_file):
    path = onnx_file(ffn_block(seq=8, d=32, hidden=64), "ffn.onnx")
    compiled = compile_api(str(path), "llvm", n_threads=1, precision="bf16")
    assert 0 < compiled.precision_error < 2e-2
    model = load_model(str(path))
    x = model.random_inputs(3)
    assert max_relative_error(compiled(*x), run_onnxruntime(onnxruntime_session(model, 1), model, x)) < 2e-2


@amx_here
def test_an_amx_build_of_convolutions_matches_float32(onnx_file):
    path = onnx_file(conv_stack(), "convs.onnx")
    compiled = compile_api(str(path), "llvm", n_threads=1, precision="bf16")
    model = load_model(str(path))
    x = model.random_inputs(3)
    assert max_relative_error(compiled(*x), run_onnxruntime(onnxruntime_session(model, 1), model, x)) < 2e-2


def test_int8_products_become_amx_kernels_where_k_is_a_multiple_of_64():
    fused = _fused_bf16(conv_stack(), SAPPHIRE_RAPIDS, "int8")
    # the 3x3 conv: 9 taps x 32 channels = 288, not a multiple of 64 (tuned); the 1x1: 32 channels (tuned)
    assert _hand_kernels(fused) == []
    fused = _fused_bf16(ffn_block(seq=8, d=64, hidden=128), SAPPHIRE_RAPIDS, "int8")
    assert _hand_kernels(fused) == [(8, 64, 128, "int8"), (8, 128, 64, "int8")]


@int8_amx_here
def test_an_int8_amx_build_matches_float32(onnx_file):
    path = onnx_file(ffn_block(seq=8, d=64, hidden=128), "ffn.onnx")
    compiled = compile_api(str(path), "llvm", n_threads=1, precision="int8")
    assert 0 < compiled.precision_error < 5e-2


def test_without_amx_bf16_matmuls_and_convolutions_become_avx512_bf16_kernels():
    fused = _fused_bf16(ffn_block(seq=8, d=32, hidden=64), ZEN4)
    assert _hand_kernels(fused) == [(8, 32, 64), (8, 64, 32)]
    assert all(gv.name_hint.startswith("avx512_bf16_matmul") for gv, f in fused.functions_items()
               if isinstance(f, PrimFunc) and is_hand_kernel(f))
    assert not any("matmul" in g.name for g in fusion_groups(fused))
    assert _hand_kernels(_fused_bf16(conv_stack(), ZEN4)) == [(25, 64, 32), (100, 32, 288)]
    assert _hand_kernels(_fused_bf16(ffn_block(seq=8, d=16, hidden=32), ZEN4)) == []  # K = 16: tuned instead


def test_without_amx_int8_products_become_vnni_kernels_on_shifted_activations():
    fused = _fused_bf16(ffn_block(seq=8, d=32, hidden=64), ZEN4, "int8")
    assert _hand_kernels(fused) == [(8, 32, 64, "uint8"), (8, 64, 32, "uint8")]
    assert not any("matmul" in g.name for g in fusion_groups(fused))
    # the 3x3 conv (9 taps x 32 channels) and the 1x1 (32 channels); the last conv has 8 output channels
    assert _hand_kernels(_fused_bf16(conv_stack(), ZEN4, "int8")) == [(25, 64, 32, "uint8"), (100, 32, 288, "uint8")]
    assert _hand_kernels(_fused_bf16(ffn_block(seq=8, d=16, hidden=32), ZEN4, "int8")) == []  # K = 16: tuned


@pytest.mark.parametrize("kind, instruction", [("bf16", "vdpbf16ps"), ("int8", "vpdpbusd")])
def test_the_avx512_kernel_is_its_instruction_on_zmm_in_parallel(kind, instruction):
    lib = tvm.compile(IRModule({"main": lowp_dense(6, 64, 64, kind).with_attr("global_symbol", "main")}), target=ZEN4)
    asm = lib.mod.inspect_source("asm")
    assert instruction in asm and "zmm" in asm
    assert "TVMBackendParallelLaunch" in lib.mod.inspect_source("ll")  # column panels x row blocks


@avx512_bf16_here
def test_the_avx512_bf16_kernel_matches_numpy():
    rng = np.random.default_rng(0)
    m, n, k = 10, 96, 64  # 10 rows: row tiles of 2
    a, w = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((m, k), (k, n)))
    out = tvm.runtime.empty((m, n), "float32", tvm.cpu())
    lib = tvm.compile(IRModule({"main": lowp_dense(m, n, k, "bf16").with_attr("global_symbol", "main")}),
                      target=make_target("llvm", 2))
    lib.mod["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(pack_lowp_weight(w, "bf16")), out)
    want = a.astype(np.float32) @ w.astype(np.float32)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-4)


@avx512_bf16_here
def test_an_avx512_bf16_build_matches_float32(onnx_file):
    for source, name in ((ffn_block(seq=8, d=32, hidden=64), "ffn.onnx"), (conv_stack(), "convs.onnx")):
        path = onnx_file(source, name)
        compiled = compile_api(str(path), "llvm", n_threads=2, precision="bf16")
        model = load_model(str(path))
        x = model.random_inputs(3)
        assert max_relative_error(compiled(*x), run_onnxruntime(onnxruntime_session(model, 1), model, x)) < 2e-2


@vnni_here
def test_the_vnni_kernel_matches_numpy_exactly():
    rng = np.random.default_rng(0)
    m, n, k = 10, 96, 96  # 10 rows: row tiles of 2
    a, w = rng.integers(0, 256, (m, k)).astype(np.uint8), rng.integers(-127, 128, (k, n)).astype(np.int8)
    out = tvm.runtime.empty((m, n), "int32", tvm.cpu())
    lib = tvm.compile(IRModule({"main": lowp_dense(m, n, k, "int8").with_attr("global_symbol", "main")}),
                      target=make_target("llvm", 2))
    lib.mod["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(pack_lowp_weight(w, "int8")), out)
    np.testing.assert_array_equal(out.numpy(), a.astype(np.int32) @ w.astype(np.int32))


@vnni_here
def test_a_vnni_int8_build_gives_what_the_tuned_int8_kernels_give(onnx_file):
    """The uint8 shift and its column-sum correction are exact: the build on this CPU (VNNI kernels) and one for
    Skylake-AVX512 (no VNNI: the int8 x int8 kernels stay tasks) agree to float32 rounding."""
    skylake = make_target('{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}')
    if not runs_here(skylake):
        pytest.skip(f"the Skylake-AVX512 build cannot run here: {why_not_here(skylake)}")
    for source, name in ((ffn_block(seq=8, d=32, hidden=64), "ffn.onnx"), (conv_stack(), "convs.onnx")):
        path = onnx_file(source, name)
        vnni = compile_api(str(path), "llvm", n_threads=2, precision="int8")
        plain = compile_api(str(path), skylake, precision="int8")
        assert 0 < vnni.precision_error < 5e-2
        x = load_model(str(path)).random_inputs(3)
        np.testing.assert_allclose(vnni(*x), plain(*x), rtol=1e-5, atol=1e-5)
