"""Graph rewrites: each named rewrite does its job, fusion groups and tasks come out right, memory plan."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx_graphs import conv_bn_relu, mlp, redundant, relax_linear

from autosched._tvm import arg_specs, relax, tvm
from autosched.errors import GraphError
from autosched.graph.frontends import load_model
from autosched.graph.passes import (
    GRAPH_PASSES,
    GraphPass,
    extract_tasks,
    fusion_groups,
    memory_plan,
    op_counts,
    rewrite,
    run_passes,
)
from autosched.spaces.settings import settings_for


def _rewrite_with_log(model, target):
    changes = []
    return rewrite(model.mod, target, on_pass=changes.append), {c.name: c for c in changes}


def test_batch_norm_folds_into_the_conv_and_relu_fuses(cpu_target):
    fused, log = _rewrite_with_log(load_model(conv_bn_relu()[0], fold_onnx_graph=False), cpu_target)
    assert log["fold batch-norm into conv weights"].changed["nn.batch_norm"] == -1
    assert log["fold permutes and arithmetic of constants (numpy)"].changed  # BN's scale and bias, precomputed
    groups = fusion_groups(fused)
    assert [(g.name.rstrip("0123456789"), g.pattern) for g in groups] == [
        ("transpose", "injective"), ("fused_conv2d_add_relu", "out-elementwise-fusable"), ("transpose", "injective")]
    assert not any("batch_norm" in k or k in ("multiply", "divide", "sqrt") for k in op_counts(fused))


def test_relu6_clips_stay_channels_last_and_fuse_into_their_convolutions(cpu_target):
    """ONNX Clip (MobileNets' ReLU6) comes from TVM's importer as calls of topi's maximum/minimum, which have no
    layout rule; as Relax operators they keep NHWC: no transposes between the convolutions, and each clip runs
    in its convolution's loop nest."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = {"W1": rng.standard_normal((8, 3, 3, 3)).astype("float32"), "lo": np.array(0.0, "float32"),
             "hi": np.array(6.0, "float32"), "W2": rng.standard_normal((8, 1, 3, 3)).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["y"])]
    graph = helper.make_graph(nodes, "relu6", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    names = [re.sub(r"\d", "", g.name) for g in fusion_groups(rewrite(model.mod, cpu_target))]
    assert names == ["transpose", "fused_convd_maximum_minimum", "fused_convd_maximum_minimum", "transpose"], names
    x = model.random_inputs(0)[0] * 10
    from autosched.deploy.build import compile_model
    from autosched.deploy.reference import onnxruntime_session, run_onnxruntime

    want = run_onnxruntime(onnxruntime_session(model, 1), model, [x])[0]
    np.testing.assert_allclose(compile_model(model, cpu_target)(x)[0], want, rtol=1e-5, atol=1e-5)
    assert want.min() == 0.0 and want.max() == 6.0  # both bounds were hit


def test_hard_swish_and_hard_sigmoid_stay_channels_last_and_fuse_into_their_convolutions(cpu_target):
    """ONNX HardSwish and HardSigmoid (MobileNetV3) come from TVM's importer as the Relax ``clip``, which has no
    layout rule: as a minimum and a maximum they keep NHWC, with no transposes around them."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = {"W1": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
             "W2": rng.standard_normal((8, 1, 3, 3)).astype("float32")}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], group=8),
             helper.make_node("HardSigmoid", ["c2"], ["y"], alpha=1 / 6, beta=0.5)]
    graph = helper.make_graph(nodes, "hard", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert op_counts(model.mod)["clip"] == 2  # what the importer gives
    fused = rewrite(model.mod, cpu_target)
    names = [re.sub(r"\d", "", g.name) for g in fusion_groups(fused)]
    assert names[0] == names[-1] == "transpose" and len(names) == 4, names  # the model's input and output only
    assert all("conv" in n and "clip" not in n and "transpose" not in n for n in names[1:3]), names
    x = model.random_inputs(0)[0] * 10
    from autosched.deploy.build import compile_model
    from autosched.deploy.reference import onnxruntime_session, run_onnxruntime

    want = run_onnxruntime(onnxruntime_session(model, 1), model, [x])[0]
    np.testing.assert_allclose(compile_model(model, cpu_target)(x)[0], want, rtol=1e-5, atol=1e-5)
    assert want.min() == 0.0 and want.max() == 1.0  # both bounds of the hard sigmoid were hit


def test_convolutions_run_channels_last_with_weights_permuted_at_compile_time(cpu_target):
    model = load_model(conv_bn_relu()[0])
    (n, c, h, w), = [s.shape for s in model.inputs]
    fused, log = _rewrite_with_log(model, cpu_target)
    # one permute for the input, one for the output, one per constant (weight, bias) folded away
    assert log["convolutions to NHWC layout"].changed["permute_dims"] == 4
    assert log["permute weights to OHWI (numpy)"].changed["permute_dims"] == -2
    conv = next(g for g in fusion_groups(fused) if "conv2d" in g.name)
    (data, _), (weight, _) = arg_specs(conv.func)[:2]
    assert data == (n, h, w, c)  # NHWC
    assert weight[-1] == c  # OHWI


def test_cse_dce_and_equal_groups_merge_into_one_weighted_task(cpu_target):
    proto, _ = redundant()
    model = load_model(proto, fold_onnx_graph=False)  # ONNX Runtime's folding would already merge the branches
    before = op_counts(model.mod)
    assert before["matmul"] == 4 and "sigmoid" not in before  # the dead Sigmoid never reaches the graph
    fused, log = _rewrite_with_log(model, cpu_target)
    assert log["eliminate common subexpressions"].changed == {"matmul": -1, "nn.relu": -1}
    tasks = extract_tasks(fused, cpu_target, settings_for(cpu_target).version)
    assert sorted(t.weight for t in tasks) == [1, 2]
    assert len({t.key for t in tasks}) == len(tasks)


def test_tasks_are_measured_with_the_models_own_weights(cpu_target):
    from onnx import numpy_helper

    proto = mlp(batch=4)
    w1 = next(numpy_helper.to_array(t) for t in proto.graph.initializer if t.name == "W1")
    fused = rewrite(load_model(proto).mod, cpu_target)
    first = next(t for t in extract_tasks(fused, cpu_target, settings_for(cpu_target).version) if "matmul" in t.name)
    assert 0 not in first.constants  # the activation
    x, *weights = first.random_inputs(0)
    assert 0.8 < x.std() < 1.2
    # the weight as the model holds it (transposed by constant folding): the same values
    assert any(w.size == w1.size and np.array_equal(np.sort(w, axis=None), np.sort(w1, axis=None)) for w in weights)


def test_constant_subgraphs_fold_in_a_relax_module(cpu_target):
    _, log = _rewrite_with_log(load_model(relax_linear()), cpu_target)
    assert log["fold permutes and arithmetic of constants (numpy)"].changed.get("permute_dims") == -1  # W^T


def test_pass_list_is_named_and_ordered():
    names = [p.name for p in GRAPH_PASSES]
    assert len(names) == len(set(names))
    assert names.index("fold batch-norm into conv weights") < names.index("legalize ops to TIR")
    assert names.index("fuse ops into groups") < names.index("merge each group into one PrimFunc")


def test_memory_plan_reuses_storage(cpu_target):
    proto, _ = redundant()
    fused = rewrite(load_model(proto).mod, cpu_target)
    plan = memory_plan(fused, cpu_target)
    assert plan.n_tensors == 3 and plan.unplanned_bytes == 3 * 4 * 16 * 4  # every tensor is 4x16 float32
    assert 0 < plan.planned_bytes <= plan.unplanned_bytes


@pytest.mark.parametrize("builder", [conv_bn_relu, redundant])
def test_task_keys_are_stable_across_imports(builder, cpu_target):
    version = settings_for(cpu_target).version
    keys = [[t.key for t in extract_tasks(rewrite(load_model(builder()[0]).mod, cpu_target), cpu_target, version)]
            for _ in range(2)]
    assert keys[0] == keys[1]


def _failing_pass(message: str):
    def make():
        @tvm.transform.module_pass(opt_level=0, name="Failing")
        def failing(mod, ctx):
            raise tvm.error.InternalError(f"Check failed: (msgs[i].IsNested()) is false: {message}")

        return failing

    return make


def test_an_optional_rewrite_that_fails_is_skipped_with_one_line(cpu_target):
    model = load_model(mlp(batch=4))
    passes = [GraphPass("broken layout", _failing_pass("relax.nn.max_pool2d expected nested")), *GRAPH_PASSES]
    fallbacks = []
    fused = run_passes(model.mod, cpu_target, passes, fallbacks=fallbacks, model_name="mlp")
    assert [f.step for f in fallbacks] == ["broken layout"]
    assert "\n" not in str(fallbacks[0]) and "relax.nn.max_pool2d" in str(fallbacks[0])
    assert len(fusion_groups(fused)) == len(fusion_groups(rewrite(model.mod, cpu_target)))  # went on without it


def test_a_required_rewrite_that_fails_is_a_one_line_graph_error(cpu_target):
    model = load_model(mlp(batch=4))
    with pytest.raises(GraphError) as info:
        run_passes(model.mod, cpu_target, [GraphPass("legalize", _failing_pass("relax.nn.conv2d"), optional=False)],
                   model_name="mlp")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("mlp: graph rewrite 'legalize' failed on operator relax.nn.conv2d")


def test_onnx_shape_subgraphs_fold_before_tvm_sees_them(cpu_target, tmp_path):
    """A channel shuffle exported without constant folding (Shape/Gather/Slice chains, as older exporters write
    ``chunk``) used to reach TVM as dynamic-shape operators that its constant folding and layout passes crash on."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")

    class Shuffle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            a, b = x.chunk(2, dim=1)
            y = torch.cat([a, torch.relu(self.conv(b.repeat(1, 2, 1, 1)))[:, :4]], dim=1)
            n, c, h, w = y.shape
            return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)

    path = tmp_path / "shuffle.onnx"
    torch.onnx.export(Shuffle().eval(), (torch.randn(1, 8, 6, 6),), str(path), dynamo=False, opset_version=13,
                      input_names=["x"], do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE)
    model = load_model(path)
    assert model.info["fallbacks"] == []
    before, after = model.info["onnx_nodes"]
    assert after < before / 2
    fallbacks = []
    fused = rewrite(model.mod, cpu_target, fallbacks=fallbacks)
    assert fallbacks == []
    from autosched.deploy.build import compile_model

    x = model.random_inputs(0)
    want = ort.InferenceSession(model.onnx_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x[0]})[0]
    got = compile_model(model, cpu_target, None, fused=fused)(*x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_numpy_constant_folding_matches_tvms(cpu_target):
    """The numpy folder computes what FoldConstant would (same IEEE operations), only faster."""
    from autosched.graph.constant_folding import fold_simple_constants

    model = load_model(conv_bn_relu()[0], fold_onnx_graph=False)
    mod = run_passes(model.mod, cpu_target, GRAPH_PASSES[:4])  # up to the first folding pass
    with cpu_target:
        by_numpy = relax.transform.FoldConstant()(fold_simple_constants(mod))
        by_tvm = relax.transform.FoldConstant()(mod)
    assert op_counts(by_numpy) == op_counts(by_tvm)
    consts = [[c.value.numpy() for c in _constants(m)] for m in (by_numpy, by_tvm)]
    assert len(consts[0]) == len(consts[1]) > 0
    for a, b in zip(sorted(consts[0], key=np.size), sorted(consts[1], key=np.size), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def _constants(mod):
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, tvm.ir.GenericConst) else 0)
    return found
