"""Fused attention: the exporters' softmax(Q Kᵀ · scale + mask) V patterns become one kernel, computing the same."""

from __future__ import annotations

import numpy as np
import pytest

from autosched._tvm import relax, tvm
from autosched.graph.attention import MIN_KEYS, UNFUSED_KEYS, fuse_attention


def _attention(n_keys: int, guard: bool = True, mask: bool = True, heads: int = 2, depth: int = 16) -> tvm.IRModule:
    """As TVM imports a Hugging Face encoder's attention: matmul, scale, additive mask, softmax, NaN guard, matmul."""
    shapes = {"q": (1, heads, n_keys, depth), "k": (1, heads, depth, n_keys), "v": (1, heads, n_keys, depth),
              "m": (1, 1, 1, n_keys)}
    args = {n: relax.Var(n, relax.TensorType(s, "float32")) for n, s in shapes.items()}
    bb = relax.BlockBuilder()
    with bb.function("main", list(args.values())):
        with bb.dataflow():
            s = bb.emit(relax.op.multiply(bb.emit(relax.op.matmul(args["q"], args["k"])), relax.const(0.25, "float32")))
            if mask:
                s = bb.emit(relax.op.add(s, args["m"]))
            p = bb.emit(relax.op.nn.softmax(s, axis=-1))
            if guard:
                p = bb.emit(relax.op.where(relax.op.isnan(p), relax.const(0.0, "float32"), p))
            out = bb.emit_output(relax.op.matmul(p, args["v"]))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod: tvm.IRModule, arrays: list[np.ndarray]) -> np.ndarray:
    ex = tvm.compile(relax.transform.LegalizeOps()(mod), target="llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def _inputs(n_keys: int, heads: int = 2, depth: int = 16) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype("float32") for s in
               ((1, heads, n_keys, depth), (1, heads, depth, n_keys), (1, heads, n_keys, depth)))
    mask = np.where(rng.random((1, 1, 1, n_keys)) < 0.2, -3.4e38, 0.0).astype("float32")  # a padding mask
    return [q, k, v, mask]


def _calls(mod: tvm.IRModule) -> str:
    return mod["main"].script()


@pytest.mark.parametrize("guard,mask", [(True, True), (False, True), (False, False)])
def test_an_exported_attention_becomes_one_fused_kernel_with_the_same_outputs(guard, mask):
    mod = _attention(MIN_KEYS, guard, mask)
    fused = fuse_attention(mod)
    script = _calls(fused)
    assert script.count("R.call_tir(fused_attention") == 1 and "R.nn.softmax" not in script and "R.matmul" not in script
    np.testing.assert_allclose(_run(fused, _inputs(MIN_KEYS)), _run(mod, _inputs(MIN_KEYS)), rtol=1e-5, atol=1e-6)


def test_short_key_rows_and_other_patterns_stay_as_they_were():
    short = _attention(MIN_KEYS // 2)
    assert "fused_attention" not in _calls(fuse_attention(short))  # the scores fit in cache: unfused
    bb, x = relax.BlockBuilder(), relax.Var("x", relax.TensorType((1, 2, MIN_KEYS, MIN_KEYS), "float32"))
    with bb.function("main", [x]):  # softmax over another axis than the keys
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(bb.emit(relax.op.nn.softmax(x, axis=2)), x))
        bb.emit_func_output(out)
    assert "fused_attention" not in _calls(fuse_attention(bb.get()))


def test_pytorch_multi_head_attention_is_fused_through_the_whole_path():
    """torch.nn.MultiheadAttention as its ONNX export reads in TVM: batched 3-D matmuls reshaped to 4-D around the
    softmax, and PyTorch's guard for rows whose keys are all masked (where(no key above -inf, 0, p))."""
    torch = pytest.importorskip("torch")
    import autosched
    from autosched.graph.passes import rewrite
    from autosched.tasks import make_target

    class SelfAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = torch.nn.MultiheadAttention(64, 4, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    module, x = SelfAttention().eval(), torch.randn(1, MIN_KEYS, 64)
    model = autosched.load_model(module, example_inputs=(x,))
    target = make_target("llvm", 1)
    assert "fused_attention" in rewrite(model.mod, target).script()
    compiled = autosched.compile(model, target)
    out = compiled(x.numpy())[0]
    np.testing.assert_allclose(np.asarray(out.numpy() if hasattr(out, "numpy") else out),
                               module(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def _windows_with_grouped_heads(n_windows: int, n_keys: int, depth: int, groups: int) -> tvm.IRModule:
    """Swin-like windows as batch, a mask per window, and grouped-query heads: K and V of 2 heads repeated to Q's
    2 x ``groups`` heads the way Hugging Face's repeat_kv exports (expand_dims, broadcast_to, reshape)."""
    heads, kv = 2 * groups, 2
    q = relax.Var("q", relax.TensorType((n_windows, heads, n_keys, depth), "float32"))
    k = relax.Var("k", relax.TensorType((n_windows, kv, n_keys, depth), "float32"))
    v = relax.Var("v", relax.TensorType((n_windows, kv, n_keys, depth), "float32"))
    m = relax.Var("m", relax.TensorType((n_windows, 1, n_keys, n_keys), "float32"))
    bb = relax.BlockBuilder()

    def repeat(x):
        wide = bb.emit(relax.op.broadcast_to(bb.emit(relax.op.expand_dims(x, 2)),
                                             (n_windows, kv, groups, n_keys, depth)))
        return bb.emit(relax.op.reshape(wide, (n_windows, heads, n_keys, depth)))

    with bb.function("main", [q, k, m, v]):
        with bb.dataflow():
            kt = bb.emit(relax.op.permute_dims(repeat(k), [0, 1, 3, 2]))
            s = bb.emit(relax.op.add(bb.emit(relax.op.multiply(bb.emit(relax.op.matmul(q, kt)),
                                                               relax.const(depth ** -0.5, "float32"))), m))
            out = bb.emit_output(relax.op.matmul(bb.emit(relax.op.nn.softmax(s, axis=-1)), repeat(v)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("n_keys,depth,groups", [(49, 32, 1), (49, 16, 2), (300, 8, 4)])
def test_windows_and_grouped_query_heads_are_fused_with_the_same_outputs(n_keys, depth, groups):
    mod = _windows_with_grouped_heads(6, n_keys, depth, groups)
    fused = fuse_attention(mod)
    assert _calls(fused).count("R.call_tir(fused_attention") == 1 and "R.nn.softmax" not in _calls(fused)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((6, 2 * groups if n == "q" else 2, n_keys, depth)).astype("float32")
              for n in ("q", "k")]
    arrays.append(np.where(rng.random((6, 1, n_keys, n_keys)) < 0.3, -100.0, 0.0).astype("float32"))
    arrays.append(rng.standard_normal((6, 2, n_keys, depth)).astype("float32"))
    np.testing.assert_allclose(_run(fused, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-6)


def test_rows_the_shipped_example_logs_tuned_unfused_stay_unfused():
    """64-255 keys (GPT 64, BERT 128, ViT 197 tokens): the shipped logs hold records of the unfused path only."""
    for n_keys in (UNFUSED_KEYS.start, 128, UNFUSED_KEYS.stop - 1):
        assert "fused_attention" not in _calls(fuse_attention(_attention(n_keys)))
    for n_keys in (UNFUSED_KEYS.start - 1, UNFUSED_KEYS.stop):  # a Swin window's 49 keys, long rows
        assert "R.call_tir(fused_attention" in _calls(fuse_attention(_attention(n_keys)))
