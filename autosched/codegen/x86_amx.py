"""Matmul kernels on Intel AMX tiles: C[M, N] = A[M, K] . B[K, N] in bf16 (``tdpbf16ps``, float32 sums) or int8
(``tdpbssd``, signed x signed, int32 sums).

AMX multiplies 16x32 by 32x16 bf16 tiles (16x64 by 64x16 int8) into a 16x16 float32 (int32) tile in one
instruction: about 10x the float32 FMA rate of the same core (measured on a Sapphire Rapids guest: 1,230 GFLOPS
in bf16 for 128x768x768 on one core, beside 110 for numpy's float32). TVM 0.27 has no AMX intrinsics, so a kernel
is a PrimFunc that calls a micro-kernel written in LLVM IR (linked in with ``pragma_import_llvm``) once per 32x32
block of C, the blocks spread over the threads. The micro-kernel keeps four C tiles in tile registers for the
whole K loop (two A tiles, two B tiles per 64-byte step of K) and stores them once; LLVM's AMX passes write the
tile configuration (``ldtilecfg``). On its first call in a process it asks Linux for the AMX state
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``).

B is packed once, at compile time, as AMX reads it, panel by panel: ``Bp[N/32, K/pack, 32, pack]`` (a row of a
B tile is 16 columns of ``pack`` consecutive k: 2 in bf16, 4 in int8; one block's 32 columns are contiguous, so
its loads stream). N must be a multiple of 32 and K of one step (32 bf16, 64 int8); M is any (its last rows go
through tiles of fewer rows). The kernels are fixed, not searched: they are marked scheduled and are not tuning
tasks.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from autosched._tvm import IRModule, PrimFunc, Target, host_cpu, tvm

BLOCK = 32  # C block per micro-kernel call (2 x 2 tiles of 16 x 16); N must be a multiple of it
_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18  # x86-64 Linux


@dataclass(frozen=True)
class AmxKind:
    """One AMX dot product: its operand and accumulator types and instruction. A tile row is 64 bytes, so one
    step of K is 64 / bytes-per-element, and B is packed with ``pack`` values of k side by side."""

    name: str
    dtype: str  # A and B
    acc_dtype: str  # C
    instruction: str  # LLVM's tdp* intrinsic
    feature: str  # LLVM's CPU feature for it
    pack: int

    @property
    def k_step(self) -> int:
        return 64 // (4 // self.pack)  # 32 bf16 values, 64 int8 values

    @property
    def kernel(self) -> str:
        return f"autosched_amx_{self.name}_32x32"

    @property
    def rows_kernel(self) -> str:
        return f"autosched_amx_{self.name}_rows_x32"


BF16 = AmxKind("bf16", "bfloat16", "float32", "tdpbf16ps", "amx-bf16", 2)
INT8 = AmxKind("int8", "int8", "int32", "tdpbssd", "amx-int8", 4)  # signed x signed (int8 symmetric quantization)
KINDS = {kind.name: kind for kind in (BF16, INT8)}


def micro_kernel_ir(kind: AmxKind) -> str:
    """The LLVM IR of ``kind``'s two micro-kernels (a 32 x 32 block; up to 16 rows of one), linked into the
    PrimFunc that calls them."""
    p = f"autosched_amx_{kind.name}"
    tiles = "".join(f"""
  %t{i}{j} = phi x86_amx [%z{i}{j}, %entry], [%n{i}{j}, %loop]""" for i in range(2) for j in range(2))
    dots = "".join(f"""
  %n{i}{j} = call x86_amx @llvm.x86.{kind.instruction}.internal(i16 16, i16 64, i16 64, x86_amx %t{i}{j}, \
x86_amx %A{i}, x86_amx %B{j})""" for i in range(2) for j in range(2))
    return f"""
@{p}_ready = internal global i32 0
declare i64 @syscall(i64, ...)
define internal void @{p}_init() {{
entry:
  %ready = load atomic i32, ptr @{p}_ready monotonic, align 4
  %first = icmp eq i32 %ready, 0
  br i1 %first, label %ask, label %done
ask:
  %r = call i64 (i64, ...) @syscall(i64 {_ARCH_PRCTL}, i64 {_ARCH_REQ_XCOMP_PERM}, i64 {_XFEATURE_XTILEDATA})
  store atomic i32 1, ptr @{p}_ready monotonic, align 4
  br label %done
done:
  ret void
}}
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.{kind.instruction}.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
; C[32, 32] (row stride ldc bytes) = A[32, {kind.k_step} * nk] (lda) . B packed [16 * nk, 32 columns, {kind.pack}] (ldb)
define i32 @{kind.kernel}(ptr %c, i64 %ldc, ptr %a, i64 %lda, ptr %b, i64 %ldb, i64 %nk) #0 {{
entry:
  call void @{p}_init()
  %z00 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z01 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z10 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z11 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %a16 = mul i64 %lda, 16
  %a1 = getelementptr i8, ptr %a, i64 %a16
  %b1 = getelementptr i8, ptr %b, i64 64
  %bstep = mul i64 %ldb, 16
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%knext, %loop]{tiles}
  %ka = mul i64 %k, 64
  %kb = mul i64 %k, %bstep
  %pa0 = getelementptr i8, ptr %a, i64 %ka
  %pa1 = getelementptr i8, ptr %a1, i64 %ka
  %pb0 = getelementptr i8, ptr %b, i64 %kb
  %pb1 = getelementptr i8, ptr %b1, i64 %kb
  %A0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa0, i64 %lda)
  %A1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa1, i64 %lda)
  %B0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb0, i64 %ldb)
  %B1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb1, i64 %ldb){dots}
  %knext = add i64 %k, 1
  %more = icmp ult i64 %knext, %nk
  br i1 %more, label %loop, label %exit
exit:
  %c16 = mul i64 %ldc, 16
  %pc01 = getelementptr i8, ptr %c, i64 64
  %pc10 = getelementptr i8, ptr %c, i64 %c16
  %pc11 = getelementptr i8, ptr %pc10, i64 64
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c, i64 %ldc, x86_amx %n00)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %pc01, i64 %ldc, x86_amx %n01)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %pc10, i64 %ldc, x86_amx %n10)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %pc11, i64 %ldc, x86_amx %n11)
  ret i32 0
}}
; C[rows, 32] = A[rows, ...] . B for 1 <= rows <= 16 (the last rows of a matrix whose row count is not a multiple
; of 32: tiles of fewer rows, configured at run time)
define i32 @{kind.rows_kernel}(ptr %c, i64 %ldc, ptr %a, i64 %lda, ptr %b, i64 %ldb, i64 %nk, i64 %rows) #0 {{
entry:
  call void @{p}_init()
  %r = trunc i64 %rows to i16
  %z0 = call x86_amx @llvm.x86.tilezero.internal(i16 %r, i16 64)
  %z1 = call x86_amx @llvm.x86.tilezero.internal(i16 %r, i16 64)
  %b1 = getelementptr i8, ptr %b, i64 64
  %bstep = mul i64 %ldb, 16
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%knext, %loop]
  %t0 = phi x86_amx [%z0, %entry], [%n0, %loop]
  %t1 = phi x86_amx [%z1, %entry], [%n1, %loop]
  %ka = mul i64 %k, 64
  %kb = mul i64 %k, %bstep
  %pa = getelementptr i8, ptr %a, i64 %ka
  %pb0 = getelementptr i8, ptr %b, i64 %kb
  %pb1 = getelementptr i8, ptr %b1, i64 %kb
  %A = call x86_amx @llvm.x86.tileloadd64.internal(i16 %r, i16 64, ptr %pa, i64 %lda)
  %B0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb0, i64 %ldb)
  %B1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb1, i64 %ldb)
  %n0 = call x86_amx @llvm.x86.{kind.instruction}.internal(i16 %r, i16 64, i16 64, x86_amx %t0, x86_amx %A, \
x86_amx %B0)
  %n1 = call x86_amx @llvm.x86.{kind.instruction}.internal(i16 %r, i16 64, i16 64, x86_amx %t1, x86_amx %A, \
x86_amx %B1)
  %knext = add i64 %k, 1
  %more = icmp ult i64 %knext, %nk
  br i1 %more, label %loop, label %exit
exit:
  %pc1 = getelementptr i8, ptr %c, i64 64
  call void @llvm.x86.tilestored64.internal(i16 %r, i16 64, ptr %c, i64 %ldc, x86_amx %n0)
  call void @llvm.x86.tilestored64.internal(i16 %r, i16 64, ptr %pc1, i64 %ldc, x86_amx %n1)
  ret i32 0
}}
attributes #0 = {{ nounwind "target-features"="+amx-tile,+{kind.feature},+avx512f" }}
"""


def fits(n: int, k: int, kind: AmxKind = BF16) -> bool:
    """Whether the kernel takes B[k, n] (any number of rows of A)."""
    return n % BLOCK == 0 and k % kind.k_step == 0


def amx_matmul(m: int, n: int, k: int, kind: AmxKind = BF16) -> PrimFunc:
    """The kernel for C[m, n] = A[m, k] . B[k, n] with B packed by ``pack_weight`` (``fits(n, k, kind)``): 32 x 32
    blocks of C, and the last rows (m not a multiple of 32) by 16-row tiles of fewer rows."""
    from tvm.script import tirx as T

    if not fits(n, k, kind) or m < 1:
        raise ValueError(f"AMX {kind.name} matmul {m}x{n}x{k}: n must be a multiple of {BLOCK} and k of "
                         f"{kind.k_step}")
    full, left = divmod(m, BLOCK)
    blocks = max(full, 1)  # (the divisor in the loop over whole blocks, which runs 0 times where full is 0)
    n_blocks, nk = n // BLOCK, k // kind.k_step
    top, bottom = min(left, 16), max(left - 16, 0)  # rows of the last block in its two 16-row halves
    row_bytes, ldb = k * (4 // kind.pack), BLOCK * 4
    ir, dtype, acc, pack = micro_kernel_ir(kind), kind.dtype, kind.acc_dtype, kind.pack
    kernel_name, rows_name = kind.kernel, kind.rows_kernel

    @T.prim_func(s_tir=True)
    def kernel(a: T.Buffer((m, k), dtype), b: T.Buffer((n // BLOCK, k // pack, BLOCK, pack), dtype),
               c: T.Buffer((m, n), acc)):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True, "op_pattern": 8})
        # One loop per micro-kernel and row count: each parallel loop becomes its own function, and LLVM cannot
        # allocate tile registers for two inlined micro-kernels of different tile shapes in one function.
        with T.sblock("root"):  # (Relax's SplitLayoutRewritePreproc expects a root and a compute block)
            with T.attr(T.int32(0), "pragma_import_llvm", ir):
                # consecutive blocks share a column panel of B (the weight, read from memory once)
                for block in T.parallel(full * n_blocks):
                    with T.sblock("amx_blocks"):
                        T.reads(a[0:m, 0:k], b[0:n // BLOCK, 0:k // pack, 0:BLOCK, 0:pack])
                        T.writes(c[0:m, 0:n])
                        T.evaluate(T.call_extern(
                            "int32", kernel_name,
                            T.address_of(c[block % blocks * BLOCK, block // blocks * BLOCK]), T.int64(n * 4),
                            T.address_of(a[block % blocks * BLOCK, 0]), T.int64(row_bytes),
                            T.address_of(b[block // blocks, 0, 0, 0]), T.int64(ldb), T.int64(nk)))
                for column in T.parallel(n_blocks if top > 0 else 0):
                    with T.sblock("amx_rows"):
                        T.reads(a[0:m, 0:k], b[0:n // BLOCK, 0:k // pack, 0:BLOCK, 0:pack])
                        T.writes(c[0:m, 0:n])
                        T.evaluate(T.call_extern(
                            "int32", rows_name, T.address_of(c[full * BLOCK, column * BLOCK]), T.int64(n * 4),
                            T.address_of(a[full * BLOCK, 0]), T.int64(row_bytes),
                            T.address_of(b[column, 0, 0, 0]), T.int64(ldb), T.int64(nk), T.int64(top)))
                for column in T.parallel(n_blocks if bottom > 0 else 0):
                    with T.sblock("amx_last_rows"):
                        T.reads(a[0:m, 0:k], b[0:n // BLOCK, 0:k // pack, 0:BLOCK, 0:pack])
                        T.writes(c[0:m, 0:n])
                        T.evaluate(T.call_extern(
                            "int32", rows_name, T.address_of(c[full * BLOCK + 16, column * BLOCK]),
                            T.int64(n * 4), T.address_of(a[full * BLOCK + 16, 0]), T.int64(row_bytes),
                            T.address_of(b[column, 0, 0, 0]), T.int64(ldb), T.int64(nk), T.int64(bottom)))

    return kernel


def pack_weight(w: np.ndarray, kind: AmxKind = BF16, block: int = BLOCK) -> np.ndarray:
    """W[K, N] -> Wp[N/block, K/pack, block, pack], the layout AMX reads B tiles in (``pack`` values of k side by
    side: 2 for bf16, 4 for int8; AVX512-BF16's kernel reads the same with blocks of 16 columns)."""
    k, n = w.shape
    return np.ascontiguousarray(w.reshape(k // kind.pack, kind.pack, n // block, block).transpose(2, 0, 3, 1))


def has_amx(target: Target, kind: AmxKind = BF16) -> bool:
    """Whether ``target`` is an x86 LLVM target with AMX for ``kind``, and, when it is this CPU, Linux lets this
    process use AMX (asked once)."""
    if str(target.kind.name) != "llvm":
        return False
    features = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target)}
    if not {"amx-tile", kind.feature} <= features:
        return False
    return str(target.attrs.get("mcpu", "")) != host_cpu() or amx_permitted()


@functools.lru_cache(maxsize=1)
def amx_permitted() -> bool:
    """Ask Linux for the AMX tile state (once per process; kernels ask again, harmlessly)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def compile_kernel(m: int, n: int, k: int, target: Target, kind: AmxKind = BF16) -> tvm.runtime.Module:
    return tvm.compile(IRModule({"main": amx_matmul(m, n, k, kind).with_attr("global_symbol", "main")}),
                       target=target)
