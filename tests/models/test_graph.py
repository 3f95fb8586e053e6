"""Graph rewrites: each named rewrite does its job, fusion groups and tasks come out right, memory plan."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import conv_bn_relu, mlp, redundant, relax_linear

from autosched._tvm import arg_specs
from autosched.models.frontends import load_model
from autosched.models.graph import (
    GRAPH_PASSES,
    extract_tasks,
    fusion_groups,
    memory_plan,
    op_counts,
    rewrite,
)
from autosched.spaces.settings import settings_for


def _rewrite_with_log(model, target):
    changes = []
    return rewrite(model.mod, target, on_pass=changes.append), {c.name: c for c in changes}


def test_batch_norm_folds_into_the_conv_and_relu_fuses(cpu_target):
    fused, log = _rewrite_with_log(load_model(conv_bn_relu()[0]), cpu_target)
    assert log["fold batch-norm into conv weights"].changed["nn.batch_norm"] == -1
    assert log["fold constants"].changed  # the folded scale and bias are computed at compile time
    groups = fusion_groups(fused)
    assert [(g.name.rstrip("0123456789"), g.pattern) for g in groups] == [
        ("transpose", "injective"), ("fused_conv2d_add_relu", "out-elementwise-fusable"), ("transpose", "injective")]
    assert not any("batch_norm" in k or k in ("multiply", "divide", "sqrt") for k in op_counts(fused))


def test_convolutions_run_channels_last_with_weights_permuted_at_compile_time(cpu_target):
    model = load_model(conv_bn_relu()[0])
    (n, c, h, w), = [s.shape for s in model.inputs]
    fused, log = _rewrite_with_log(model, cpu_target)
    # one permute for the input, one for the output, one per constant (weight, bias) folded away
    assert log["convolutions to NHWC layout"].changed["permute_dims"] == 4
    assert log["fold constants (weights to OHWI)"].changed["permute_dims"] == -2
    conv = next(g for g in fusion_groups(fused) if "conv2d" in g.name)
    (data, _), (weight, _) = arg_specs(conv.func)[:2]
    assert data == (n, h, w, c)  # NHWC
    assert weight[-1] == c  # OHWI


def test_cse_dce_and_equal_groups_merge_into_one_weighted_task(cpu_target):
    proto, _ = redundant()
    model = load_model(proto)
    before = op_counts(model.mod)
    assert before["matmul"] == 4 and "sigmoid" not in before  # the dead Sigmoid never reaches the graph
    fused, log = _rewrite_with_log(model, cpu_target)
    assert log["eliminate common subexpressions"].changed == {"matmul": -1, "nn.relu": -1}
    tasks = extract_tasks(fused, cpu_target, settings_for(cpu_target).version)
    assert sorted(t.weight for t in tasks) == [1, 2]
    assert len({t.key for t in tasks}) == len(tasks)


def test_tasks_are_measured_with_weights_of_the_models_own_magnitude(cpu_target):
    from onnx import numpy_helper

    proto = mlp(batch=4)
    w1 = next(numpy_helper.to_array(t) for t in proto.graph.initializer if t.name == "W1")
    fused = rewrite(load_model(proto).mod, cpu_target)
    first = next(t for t in extract_tasks(fused, cpu_target, settings_for(cpu_target).version) if "matmul" in t.name)
    w1_rms = float(np.sqrt(np.mean(w1.astype(np.float64) ** 2)))
    scales = first.info["input_scales"]
    assert scales[0] is None  # the activation: standard normal
    assert w1_rms in [pytest.approx(s) for s in scales if s is not None]
    x, *weights = first.random_inputs(0)
    assert 0.8 < x.std() < 1.2
    assert any(abs(np.sqrt(np.mean(w.astype(np.float64) ** 2)) / w1_rms - 1) < 0.2 for w in weights)


def test_constant_subgraphs_fold_in_a_relax_module(cpu_target):
    _, log = _rewrite_with_log(load_model(relax_linear()), cpu_target)
    assert log["fold constants"].changed.get("permute_dims") == -1  # W^T of a constant W is precomputed


def test_pass_list_is_named_and_ordered():
    names = [name for name, _ in GRAPH_PASSES]
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
