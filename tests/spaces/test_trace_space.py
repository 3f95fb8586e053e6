from __future__ import annotations

import itertools
import math
import subprocess
import sys
import textwrap

import pytest

from autosched._tvm import structural_equal, tvm
from autosched.errors import InvalidConfig, UserInputError
from autosched.paths import data_dir
from autosched.spaces.settings import load_settings, settings_for
from autosched.spaces.trace_space import TraceSearchSpace, decode_tile, divisors, refit_tile
from autosched.tasks import op_task


@pytest.mark.parametrize("extent,levels,max_inner", [(512, 4, 64), (56, 4, 64), (3, 2, 64), (768, 2, 16)])
def test_decode_tile_is_always_a_legal_tiling(extent, levels, max_inner):
    top = len(divisors(extent)) - 1
    for idx in itertools.product(range(0, top + 1, max(1, top // 4)), repeat=levels - 1):
        tile = decode_tile(extent, levels, max_inner, list(idx))
        assert len(tile) == levels and math.prod(tile) == extent
        assert tile[-1] <= max_inner


def test_decode_tile_is_monotone_in_the_innermost_knob():
    inner = [decode_tile(512, 4, 64, [0, 0, i])[-1] for i in range(10)]
    assert inner == sorted(inner) and inner[0] == 1 and inner[-1] == 64


def test_refit_tile_keeps_the_inner_factors_that_divide_and_gives_the_rest_to_the_outermost():
    assert refit_tile([2, 1, 4, 8], 48) == (2, 1, 3, 8)  # 8 divides 48; 4 does not divide 6: 3
    assert refit_tile([1, 4, 16], 24) == (1, 2, 12)
    assert refit_tile([64, 1], 40) == (40, 1)
    assert refit_tile([8, 8], 1) == (1, 1)
    for extent in (1, 7, 24, 40, 56, 208):
        assert math.prod(refit_tile([2, 1, 4, 8], extent)) == extent


def test_a_schedule_transfers_to_the_same_function_at_other_sizes(cpu_target):
    """Schedules of a 64-row matmul, refitted to 40 rows: same design, legal tiles, correct results."""
    import random

    import numpy as np

    settings = settings_for(cpu_target)
    space64 = TraceSearchSpace(op_task("matmul", (64, 32, 48), cpu_target, settings.version).mod, cpu_target,
                               settings)
    space40 = TraceSearchSpace(op_task("matmul", (40, 32, 48), cpu_target, settings.version).mod, cpu_target,
                               settings)
    rng, done = random.Random(0), 0
    while done < 3:
        design = rng.randrange(len(space64.designs))
        params = {"design": design} | {k: rng.randint(d.low, d.high) for k, d in space64.knobs(design).items()}
        try:
            donor = space64.apply(params)
        except InvalidConfig:
            continue
        sch = space40.transfer(donor.trace)
        tiles = [[int(f) for f in sch.trace.decisions[i]] for i in sch.trace.insts
                 if i.kind.name == "SamplePerfectTile"]
        old = [[int(f) for f in donor.trace.decisions[i]] for i in donor.trace.insts
               if i.kind.name == "SamplePerfectTile"]
        assert len(tiles) == len(old) and math.prod(tiles[0]) == 40  # the rows: refitted; the rest as tuned
        assert tiles[1:] == old[1:] and tiles[0][-1] <= old[0][-1]
        a, b = (np.random.default_rng(done).standard_normal(s).astype("float32") for s in ((40, 48), (48, 32)))
        out = tvm.runtime.tensor(np.zeros((40, 32), "float32"))  # matmul (M, N, K) = (40, 32, 48)
        tvm.compile(sch.mod, target=cpu_target)["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
        done += 1
    other = TraceSearchSpace(op_task("softmax", (8, 64), cpu_target, settings.version).mod, cpu_target, settings)
    with pytest.raises(InvalidConfig, match="no design"):
        other.transfer(space64.apply(space64.default_params(0)).trace)


def test_matmul_space_has_ordinal_knobs_per_design(matmul_space):
    knobs = matmul_space.knobs()
    assert list(knobs["design"].choices) == list(range(len(matmul_space.designs)))
    d0 = matmul_space.knobs(0)
    assert d0 and all(name.startswith("d0.") for name in d0)
    assert any(name.endswith("tile3") for name in d0)  # 4-level spatial tiles: 3 knobs, outermost implied
    assert matmul_space.size() > 1000


def test_apply_produces_a_postprocessed_schedule_that_builds(matmul_space, matmul_task):
    design = matmul_space.designs[0]
    assert any("meta_schedule.parallel" in line for line in design.as_python())  # the design: annotations only
    sch = matmul_space.apply(matmul_space.default_params(0))
    script = sch.mod.script()
    assert "meta_schedule.parallel" not in script and "meta_schedule.vectorize" not in script  # postprocessed
    assert "T.vectorized" in script
    assert tvm.compile(sch.mod, target=matmul_task.target).mod["main"] is not None


def test_default_params_reproduce_the_design_trace(matmul_space):
    sch = matmul_space.apply(matmul_space.default_params(0))
    trace = matmul_space.designs[0]
    expected = [[int(x) for x in d] if not isinstance(d, int) and hasattr(d, "__len__") else int(d)
                for i, d in trace.decisions.items() if i.kind.name.startswith("Sample")]
    assert matmul_space.effective_decisions(sch) == expected


def test_different_params_give_different_schedules(matmul_space):
    a = matmul_space.default_params(0)
    b = dict(a)
    name = next(k for k in b if k.endswith("tile3"))
    b[name] = 0 if a[name] else 3
    sa, sb = matmul_space.apply(a), matmul_space.apply(b)
    assert matmul_space.effective_decisions(sa) != matmul_space.effective_decisions(sb)
    assert not structural_equal(sa.mod, sb.mod)


def test_postproc_rejection_raises_invalid_config(matmul_task):
    class RejectAll:
        def apply(self, sch):
            return False

    space = TraceSearchSpace(matmul_task.mod, matmul_task.target, settings_for(matmul_task.target))
    space._postprocs = [RejectAll()]
    with pytest.raises(InvalidConfig, match="rejected by RejectAll"):
        space.apply(space.default_params(0))


def test_shipped_settings_load_and_carry_a_version(cpu_target):
    cpu = settings_for(cpu_target)
    assert cpu.name == "cpu" and cpu.version >= 1 and cpu.knobs["tile"] == "divisor_index"
    assert {p.name for p in data_dir("search_spaces").glob("*.toml")} >= {"cpu.toml", "cuda.toml"}


def test_a_folder_named_by_the_environment_replaces_the_shipped_search_spaces(cpu_target, tmp_path, monkeypatch):
    shipped = settings_for(cpu_target)
    text = (data_dir("search_spaces") / "cpu.toml").read_text()
    text = text.replace(f"version = {shipped.version}", f"version = {shipped.version + 1000}", 1)
    (tmp_path / "cpu.toml").write_text(text.replace("fuse_epilogues = true", "fuse_epilogues = false"))
    monkeypatch.setenv("AUTOSCHED_SEARCH_SPACES", str(tmp_path))
    mine = settings_for(cpu_target)
    assert (mine.version, mine.fuse_epilogues) == (shipped.version + 1000, False)
    monkeypatch.setenv("AUTOSCHED_SEARCH_SPACES", str(tmp_path / "nothing-here"))
    with pytest.raises(UserInputError, match="no search space in .*nothing-here"):
        settings_for(cpu_target)


def test_unsupported_knob_encoding_is_refused(tmp_path):
    text = (data_dir("search_spaces") / "cpu.toml").read_text().replace('tile = "divisor_index"', 'tile = "tuple"')
    path = tmp_path / "cpu.toml"
    path.write_text(text)
    with pytest.raises(UserInputError, match="knob encoding tile='tuple'"):
        load_settings(path)


def test_the_tensor_core_output_scope_is_read_checked_and_only_changes_tensor_core_targets(tmp_path):
    from autosched.spaces.tensor_core import tensor_core_rules
    from autosched.tasks import make_target

    cuda = data_dir("search_spaces") / "cuda.toml"
    assert load_settings(cuda).tensor_core_output == "shared"
    path = tmp_path / "cuda.toml"
    path.write_text(cuda.read_text().replace('output_scope = "shared"', 'output_scope = "registers"'))
    with pytest.raises(UserInputError, match="output_scope 'registers'"):
        load_settings(path)
    settings = load_settings(cuda)
    assert settings.schedule_rules(make_target("llvm")) == "from-target"  # the CPU's rules are TVM's
    assert tensor_core_rules(make_target('{"kind": "cuda", "arch": "sm_70"}'), "shared") is None  # before sm_75
    rules = settings.schedule_rules(make_target("sm_90"))
    assert [type(r).__name__ for r in rules].count("MultiLevelTilingTensorCore") == 2  # wmma (ours) and mma


def test_cuda_space_generates_and_rejects_before_build():
    from autosched.tasks import make_target, op_task

    target = make_target("cuda")
    task = op_task("matmul", (256, 256, 256), target, settings_for(target).version)
    space = TraceSearchSpace(task.mod, target, settings_for(target), seed=1)
    assert "VerifyGPUCode" in settings_for(target).postprocs
    import random

    rng = random.Random(0)
    n_ok = n_rejected = 0
    for _ in range(80):
        design = rng.randrange(len(space.designs))
        params = {"design": design, **{k: rng.randint(d.low, d.high) for k, d in space.knobs(design).items()}}
        try:
            sch = space.apply(params)
        except InvalidConfig:
            n_rejected += 1
            continue
        n_ok += 1
        if n_ok <= 2:
            ex = tvm.compile(sch.mod, target=target)
            assert [m.kind for m in ex.mod.imports] == ["cuda"]
    assert n_ok >= 1 and n_rejected >= 1


def test_register_tile_check_rejects_huge_innermost_tiles(cpu_target):
    from autosched.tasks import op_task

    task = op_task("matmul", (128, 128, 128), cpu_target, 1)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target))
    assert space.settings.checks["max_register_tile"] == 1024
    params = space.default_params(0)
    top = len(divisors(128)) - 1
    for name in params:
        if name.endswith("tile3"):  # innermost spatial level: 64 (the max) on both axes -> 64 x 64
            params[name] = top
    with pytest.raises(InvalidConfig, match="register tile of 4096 elements"):
        space.apply(params)


def test_a_cpu_space_registers_the_cpu_intrinsics_only_and_a_cuda_space_then_gets_its_own():
    """TVM's tensor-intrinsic package registers every target's intrinsics (the CUDA ones take seconds of
    parsing); a space registers the ones its target can use. In a fresh process: what a test session
    registered earlier would hide the difference."""
    script = textwrap.dedent("""
        import sys
        from autosched._tvm import s_tir
        from autosched.spaces.settings import settings_for
        from autosched.spaces.trace_space import TraceSearchSpace
        from autosched.tasks import make_target, op_task

        def registered(name):
            return s_tir.TensorIntrin.get(name, allow_missing=True) is not None

        for target in (make_target("llvm", 1), make_target("cuda")):
            task = op_task("matmul", (64, 64, 64), target, settings_for(target).version)
            TraceSearchSpace(task.mod, target, settings_for(target))
            print(registered("dot_16x4_vnni"), registered("mma_ldmatrix_f16_a"))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True", "True"]
