"""The object code of x86 builds, disassembled: a build for a CPU uses no instruction from an extension that CPU
lacks (EVEX/zmm in an AVX2 build, AMX tiles in a build for a CPU without AMX), and a build for a CPU with the
extension does use it (the check can fail). Code generation only: the builds are for other CPUs, never run here."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from autosched import api
from autosched.targets import make_target

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")

# What an extension's instructions look like in objdump's AT&T syntax.
EVEX = re.compile(r"%zmm\d+|%[xy]mm(?:1[6-9]|2\d|3[01])\b|%k[0-7]\b|\{1to\d+\}")  # zmm, xmm16-31, k-masks, broadcast
AMX = re.compile(r"\b(?:tdp\w+|tileloadd\w*|tilestored|ldtilecfg|sttilecfg|tilezero|tilerelease)\b")
FORBIDDEN = {"EVEX": EVEX, "AMX": AMX}

AVX2_CPUS = ("x86-64-v3", "znver3")  # AVX2 and FMA, no AVX-512, no AMX
AVX512_CPUS = ("skylake-avx512", "znver4")  # AVX-512, no AMX


@functools.cache
def _disassembly(model: str, mcpu: str, precision: str, folder: Path) -> str:
    """objdump -d of ``model`` built for ``mcpu`` (the project's build path: default schedules, no database)."""
    target = make_target(f'{{"kind": "llvm", "mcpu": "{mcpu}", "num-cores": 1}}')
    lib = api.compile(f"zoo:{model}", target, precision=precision).export_library(
        folder / f"{model}-{mcpu}-{precision}.so"
    )
    return subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def disassemble(tmp_path_factory):
    folder = tmp_path_factory.mktemp("isa")
    return lambda model, mcpu, precision="fp32": _disassembly(model, mcpu, precision, folder)


def _found(pattern: re.Pattern, asm: str) -> list[str]:
    return sorted(set(pattern.findall(asm)))


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_mlp"])  # convolutions; matmuls
@pytest.mark.parametrize("mcpu", AVX2_CPUS)
def test_an_avx2_build_has_no_evex_and_no_amx_instruction(disassemble, model, mcpu):
    asm = disassemble(model, mcpu)
    assert "%ymm" in asm  # vectorized at all: the AVX2 registers are used
    for name, pattern in FORBIDDEN.items():
        assert not _found(pattern, asm), f"{name} instructions in a build for {mcpu}"


@pytest.mark.parametrize("mcpu", AVX512_CPUS)
def test_an_avx512_build_uses_zmm_and_no_amx(disassemble, mcpu):
    asm = disassemble("tiny_cnn", mcpu)
    assert "%zmm" in asm  # the check above would see these
    assert not _found(AMX, asm)


@pytest.mark.parametrize("mcpu", [*AVX2_CPUS, *AVX512_CPUS])
def test_a_bf16_build_for_a_cpu_without_amx_has_no_tile_instruction(disassemble, mcpu):
    assert not _found(AMX, disassemble("tiny_mlp", mcpu, "bf16"))


def test_a_bf16_build_for_an_amx_cpu_uses_tiles(disassemble):
    found = _found(AMX, disassemble("tiny_mlp", "sapphirerapids", "bf16"))
    assert {"ldtilecfg", "tdpbf16ps"} <= set(found), found  # the check above would see these


# --- aarch64: a NEON-only CPU's build has no SVE instruction -------------------------------------------------
SVE = re.compile(r"\b[zp]\d+\.[bhsdq]\b|\bp\d+/[zm]\b|\b(?:ptrue|whilelo|whilelt|index)\b")  # z/p registers
AARCH64_OBJDUMP = "aarch64-linux-gnu-objdump"
_cross = pytest.mark.skipif(
    shutil.which(AARCH64_OBJDUMP) is None or shutil.which("aarch64-linux-gnu-gcc") is None,
    reason="the aarch64 cross tools are not installed (apt-get install gcc-aarch64-linux-gnu)",
)


@functools.cache
def _aarch64_disassembly(mcpu: str, folder: Path) -> str:
    lib = api.compile("zoo:tiny_cnn", make_target(f"aarch64:{mcpu}", 1)).export_library(folder / f"cnn-{mcpu}.so")
    return subprocess.run(
        [AARCH64_OBJDUMP, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True
    ).stdout


@_cross
def test_a_neon_build_has_no_sve_instruction(tmp_path_factory):
    asm = _aarch64_disassembly("neoverse-n1", tmp_path_factory.mktemp("neon"))
    assert re.search(r"\bv\d+\.4s\b", asm)  # four-lane float NEON registers are used
    assert not _found(SVE, asm)


@_cross
def test_an_sve_cpus_build_may_use_sve(tmp_path_factory):
    assert _found(SVE, _aarch64_disassembly("neoverse-v1", tmp_path_factory.mktemp("sve")))  # the check above sees it
