"""Targets as data: this CPU, CUDA by tag or architecture, aarch64 by cross-compilation; keys carry the target."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched import targets
from autosched._tvm import PREFER_256, Target, cpu_features, host_cpu, host_features, missing_features, s_tir, te, tvm
from autosched.errors import UserInputError
from autosched.paths import data_dir
from autosched.spaces.settings import settings_for
from autosched.targets import (
    check_measurable,
    cross_cpu_target,
    device_kind,
    export_compiler,
    has_device,
    host_execution_target,
    make_target,
    runs_here,
    target_json,
    use_nvcc_without_nvrtc,
)
from autosched.tasks import op_task

# Shipped tuning logs are keyed by the CPU target JSON and the CPU search space: both must never change by accident.
CPU_TARGET_JSON = '{"keys": ["cpu"], "kind": "llvm", "mcpu": "%s", "num-cores": 2, "tag": ""}'
CPU_MATMUL_KEY_ZNVER3 = "c564cc688163428354b1"  # matmul 32x32x32, make_target("llvm", 2) on a znver3, cpu.toml v2
# cpu.toml's last change: [designs] stream_injective, a design appended after the others (no version bump)
CPU_TOML_SHA256 = "b166aebde3ec953139adccac2a7c0d83997cd596a40e5ac2f396b1959cb05c2e"


def _expected_cpu_target_json() -> str:
    if not host_features():  # as every CPU target before the features were added
        return CPU_TARGET_JSON % host_cpu()
    return CPU_TARGET_JSON.replace('"mcpu"', '"mattr": %s, "mcpu"') % (json.dumps(host_features()), host_cpu())


def test_cpu_target_json_is_unchanged():
    assert target_json(make_target("llvm", 2)) == _expected_cpu_target_json()
    assert target_json(make_target("cpu", 2)) == _expected_cpu_target_json()
    from autosched import tasks  # the names callers have always imported from autosched.tasks

    assert tasks.make_target is make_target and tasks.target_json is target_json


def test_cpu_task_key_is_unchanged(monkeypatch):
    monkeypatch.setattr(targets, "host_cpu", lambda: "znver3")  # the key on any machine, as on a znver3
    monkeypatch.setattr(targets, "host_features", lambda: [])  # (which has every feature LLVM gives it)
    target = make_target("llvm", 2)
    assert op_task("matmul", (32, 32, 32), target, settings_for(target).version).key == CPU_MATMUL_KEY_ZNVER3


def test_cpu_search_space_file_is_unchanged():
    text = (data_dir("search_spaces") / "cpu.toml").read_bytes()
    assert hashlib.sha256(text).hexdigest() == CPU_TOML_SHA256, (
        "cpu.toml changed: shipped tuning logs depend on it; bump its version where a stored record would now replay "
        "to another schedule (a design appended after the others, as [designs] stream_reductions and "
        "partition_concats and serial_small, does not), and update this hash on purpose")


@pytest.mark.parametrize("spec,tag,arch", [("sm_80", "nvidia/nvidia-a100", "sm_80"),
                                           ("cuda:sm_80", "nvidia/nvidia-a100", "sm_80"),
                                           ("sm_90", "nvidia/nvidia-h100", "sm_90"),
                                           ("sm_90a", "nvidia/nvidia-h100", "sm_90a"),
                                           ("cuda:sm_89", "nvidia/geforce-rtx-4090", "sm_89")])
def test_cuda_architecture_takes_the_limits_of_its_gpu(spec, tag, arch):
    target, reference = make_target(spec), json.loads(str(Target(tag)))
    assert target.kind.name == "cuda" and str(target.attrs["arch"]) == arch
    for key in ("max_threads_per_block", "max_shared_memory_per_block", "registers_per_block", "thread_warp_size",
                "max_num_threads", "l2_cache_size_bytes"):
        assert int(target.attrs[key]) == reference[key], key


def test_cuda_tag_and_alias_still_work():
    assert str(make_target("nvidia/nvidia-a100").attrs["arch"]) == "sm_80"
    assert target_json(make_target("cuda")) == target_json(Target("nvidia/nvidia-h100"))


def test_a_json_cuda_target_gets_the_limits_it_lacks():
    target = make_target('{"kind": "cuda", "arch": "sm_80", "max_shared_memory_per_block": 65536}')
    assert int(target.attrs["max_shared_memory_per_block"]) == 65536  # given: kept
    assert int(target.attrs["max_threads_per_block"]) == 1024 and int(target.attrs["registers_per_block"]) == 65536


def test_the_full_target_is_in_the_task_key():
    keys = {spec: op_task("matmul", (64, 64, 64), t := make_target(spec), settings_for(t).version).key
            for spec in ("sm_80", "sm_90", "sm_90a", "aarch64", "llvm")}
    assert len(set(keys.values())) == len(keys)


def test_aarch64_is_an_llvm_cross_target():
    target = make_target("aarch64", 4)
    assert target.kind.name == "llvm" and str(target.attrs["mtriple"]) == "aarch64-linux-gnu"
    assert str(target.attrs["mcpu"]) == "neoverse-n1" and list(target.attrs["mattr"]) == ["+neon"]
    assert int(target.attrs["num-cores"]) == 4 and not runs_here(target)
    assert str(make_target("aarch64:cortex-a76").attrs["mcpu"]) == "cortex-a76"
    assert target_json(make_target("arm64", 4)) == target_json(target)
    assert runs_here(make_target("llvm")) and not runs_here(make_target("sm_80"))
    assert settings_for(target).name == "cpu"  # same search space as any LLVM CPU (the key differs by target)


def test_aarch64_code_generation_without_a_cross_toolchain(tmp_path):
    target = make_target("aarch64", 4)
    task = op_task("matmul", (32, 32, 32), target, settings_for(target).version)
    ex = tvm.compile(task.mod, target=target)
    asm = ex.mod.inspect_source("asm")
    assert "fmla" in asm or "fmul" in asm  # AArch64 floating-point instructions
    ex.mod.write_to_file(str(tmp_path / "matmul.o"))
    header = (tmp_path / "matmul.o").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # e_machine EM_AARCH64


def test_building_aarch64_without_its_cross_compiler_names_the_tool(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no cross compiler, whatever is installed
    with pytest.raises(UserInputError) as err:
        export_compiler(make_target("aarch64"))
    message = str(err.value)
    assert "\n" not in message and "aarch64-linux-gnu-gcc" in message and "apt-get install" in message
    assert export_compiler(make_target("llvm")) is None and export_compiler(make_target("sm_80")) is None


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="aarch64-linux-gnu-gcc is not installed")
def test_aarch64_library_links_with_the_cross_compiler(tmp_path):
    target = cross_cpu_target("aarch64", 2)
    ex = tvm.compile(op_task("matmul", (16, 16, 16), target, 2).mod, target=target)
    ex.export_library(str(tmp_path / "m.so"), fcompile=export_compiler(target))
    assert os.path.getsize(tmp_path / "m.so") > 0


@pytest.mark.parametrize("spec,words", [("bogus", ["unknown target 'bogus'", "sm_80", "aarch64", "nvidia/nvidia-h100"]),
                                        ("sm_99", ["unknown CUDA architecture 'sm_99'", "sm_80", "sm_90"]),
                                        ("sm_80a", ["unknown CUDA architecture 'sm_80a'"]),
                                        ("aarch64:pentium", ["unknown aarch64 CPU 'pentium'", "neoverse-n1"]),
                                        ("[]", ["unknown target '[]'"])])
def test_unknown_targets_are_one_line_errors(spec, words):
    with pytest.raises(UserInputError) as err:
        make_target(spec)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=24), st.sampled_from(["sm_", "cuda:", "aarch64:", "arm64:", "sm_90a", "cuda:sm_"])
                 .flatmap(lambda p: st.text(max_size=8).map(lambda t: p + t)),
                 st.text(max_size=16).map(lambda t: '{"kind": "cuda", "arch": ' + t + "}")))
def test_any_text_is_a_target_or_a_one_line_error(spec):
    try:
        target = make_target(spec)
    except UserInputError as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(target, Target)


def test_the_host_target_has_every_instruction_set_the_cpu_reports():
    """A VM may show LLVM an older CPU model than its features (a Sapphire Rapids guest seen as "rocketlake");
    the target adds what /proc/cpuinfo reports, so AVX-512 BF16 and VNNI code is generated where they exist."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags here")
    features = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(make_target("llvm", 1))}
    for flag, feature in [("avx512_bf16", "avx512bf16"), ("avx512_vnni", "avx512vnni"), ("avx_vnni", "avxvnni"),
                          ("avx512f", "avx512f"), ("avx2", "avx2"), ("fma", "fma")]:
        if flag in flags:
            assert feature in features, f"the CPU reports {flag} but the target lacks {feature}"
    assert not missing_features(make_target("llvm", 1))  # and nothing it lacks


# --- code built for a target runs only on a CPU with the target's instruction sets -----------------------------------
# Every CPU the tests build for, and a target no CPU runs (AMD's XOP and Intel's AVX-512 FP16 never met)
TEST_CPUS = ("sapphirerapids", "emeraldrapids", "skylake-avx512", "icelake-server", "znver3", "znver4", "znver5",
             "x86-64-v3", "x86-64-v4")
NO_CPU = '{"kind": "llvm", "mcpu": "x86-64", "mattr": ["+xop", "+avx512fp16"], "num-cores": 1}'
# LLVM's feature -> the /proc/cpuinfo flag that says a CPU has it (a second opinion on LLVM's reading of cpuid)
CPUINFO_FLAGS = {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512bw": "avx512bw",
                 "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
                 "avxvnni": "avx_vnni", "amx-tile": "amx_tile", "sse4a": "sse4a", "xop": "xop"}
x86_only = pytest.mark.skipif(not tvm.target.codegen.llvm_get_system_triple().startswith("x86_64"),
                              reason="the CPUs named here are x86's; this machine is not")


@x86_only
@pytest.mark.parametrize("cpu", [*TEST_CPUS, "host"])
def test_a_target_runs_here_only_where_this_cpu_has_its_instruction_sets(cpu):
    try:
        flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags here")
    target = make_target("llvm", 1) if cpu == "host" else make_target(json.dumps({"kind": "llvm", "mcpu": cpu}))
    lacking = {f for f, flag in CPUINFO_FLAGS.items() if f in cpu_features(target) and flag not in flags}
    if lacking:
        assert not runs_here(target) and lacking <= set(missing_features(target))
    assert runs_here(target) == (not missing_features(target))
    assert cpu != "host" or runs_here(target)
    assert not runs_here(make_target(NO_CPU))


@x86_only
def test_a_build_for_a_cpu_this_one_is_not_is_refused_in_one_line_never_run(onnx_mlp):
    from autosched.api import compile as compile_api

    compiled = compile_api(onnx_mlp, make_target(NO_CPU))  # building for another CPU is fine (deployment)
    with pytest.raises(UserInputError, match="this CPU lacks .*xop") as err:
        compiled(*compiled_inputs(compiled))
    assert "\n" not in str(err.value)
    with pytest.raises(UserInputError, match="xop"):
        check_measurable(make_target(NO_CPU))
    assert target_json(host_execution_target(make_target(NO_CPU))) == target_json(make_target("llvm", 1))
    here = make_target("llvm", 2)
    assert host_execution_target(here) is here


@x86_only
def test_int8_calibration_for_another_cpu_runs_a_build_for_this_one(onnx_mlp):
    """Calibration executes the float32 model: for another CPU's target it builds for this one (the test's guard,
    tests/conftest.py, fails any test that runs a build this CPU cannot; the CPU itself would kill pytest)."""
    from autosched.api import compile as compile_api

    compiled = compile_api(onnx_mlp, make_target(NO_CPU), precision="int8")
    assert compiled.precision == "int8" and compiled.precision_error is None  # measured where it runs


@x86_only
def test_the_guard_fails_a_test_that_runs_code_this_cpu_cannot():
    a = te.placeholder((16,), name="a")
    built = tvm.compile(te.create_prim_func([a, te.compute((16,), lambda i: a[i] + 1.0, name="b")]),
                        target=make_target(NO_CPU))
    assert "xop" in built.mod.inspect_source("ll") or built.mod.inspect_source("asm")  # inspecting is allowed
    for run in (lambda: built["main"], lambda: built.mod["main"]):
        with pytest.raises(pytest.fail.Exception, match="lacks"):
            run()


def compiled_inputs(compiled):
    import numpy as np

    return [np.zeros(spec.shape, spec.dtype) for spec in compiled.inputs]


@pytest.fixture
def onnx_mlp(tmp_path):
    pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32) * 0.1, "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                               helper.make_node("MatMul", ["r", "W2"], ["y"])], "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              [w, numpy_helper.from_array(np.ones((32, 8), np.float32) * 0.1, "W2")])
    path = tmp_path / "mlp.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return str(path)


def test_an_avx512_host_target_keeps_512_bit_vectors():
    """LLVM tunes Intel's AVX-512 CPUs for 256-bit vectors and would split every 16-lane float32 vector of a
    schedule in two; the host target turns that off."""
    features = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(make_target("llvm", 1))}
    if "avx512f" not in features:
        pytest.skip("no AVX-512 here")
    assert PREFER_256 not in features
    add = te.placeholder((1024,), name="a")
    out = te.compute((1024,), lambda i: add[i] * 2.0 + 1.0, name="out")
    sch = s_tir.Schedule(te.create_prim_func([add, out]))
    sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("out"))[0], [None, 16])[1])
    asm = tvm.compile(sch.mod, target=make_target("llvm", 1)).mod.inspect_source("asm")
    assert re.search(r"vfmadd\w*\s+[^\n]*%zmm", asm) and not re.search(r"vfmadd\w*\s+[^\n]*%ymm", asm)


# --- where a target's kernels are measured ----------------------------------------------------------------------
def test_each_target_runs_on_its_own_device_kind():
    assert device_kind(make_target("llvm")) == "cpu" and device_kind(make_target("aarch64")) == "cpu"
    assert device_kind(make_target("sm_90")) == "cuda"


def test_a_gpu_target_without_a_gpu_is_refused_unless_measured_remotely():
    target = make_target("sm_80")
    if has_device("cuda"):
        assert check_measurable(target) is target
    else:
        with pytest.raises(UserInputError, match="needs a cuda device, and this machine has none.*--rpc") as err:
            check_measurable(target)
        assert "\n" not in str(err.value)
    assert check_measurable(target, remote=True) is target  # the devices under the --key have it
    with pytest.raises(UserInputError, match="cannot run code for aarch64.*--rpc"):
        check_measurable(make_target("aarch64"))
    if shutil.which("aarch64-linux-gnu-gcc"):  # measured on aarch64 devices over RPC, linked here
        assert check_measurable(make_target("aarch64"), remote=True).kind.name == "llvm"
    assert check_measurable(make_target("llvm")).kind.name == "llvm"


def test_cuda_builds_use_nvcc_where_nvrtc_is_missing(monkeypatch):
    import importlib.util

    monkeypatch.delenv("TVM_CUDA_COMPILE_MODE", raising=False)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no cuda-bindings
    use_nvcc_without_nvrtc()
    assert os.environ["TVM_CUDA_COMPILE_MODE"] == "nvcc"
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvrtc")  # a user's choice stays
    use_nvcc_without_nvrtc()
    assert os.environ["TVM_CUDA_COMPILE_MODE"] == "nvrtc"
