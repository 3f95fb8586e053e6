"""x86 low-precision tensor intrinsics (bf16 AVX512-BF16, plus portable twins) for TVM 0.27 tensorization.

TVM 0.27 ships ``dot_16x4_vnni`` (u8 x s8 -> s32, ``vpdpbusd``) and ``dot_16x4_avx512`` in
``tvm.s_tir.tensor_intrin.x86``, but nothing for bf16. ``register_lowp_intrins()`` adds:

  dot_16x2_bf16_avx512  C[16] f32 += A[2] bf16 . B[16, 2] bf16 with ``llvm.x86.avx512bf16.dpbf16ps.512``
                        (one ``vdpbf16ps zmm``); needs an LLVM target with +avx512bf16 (znver4/5, sapphirerapids).
  dot_16x2_bf16_ref     same description, plain vector TIR (bf16 -> f32 shift + FMA): runs on any x86
                        (AVX2 hosts), used to verify schedules/layouts where the CPU lacks AVX512-BF16.
  dot_16x4_u8i8i32_ref  the description of ``dot_16x4_vnni`` with plain vector TIR (for AVX2 hosts).

The weight must be packed so one intrinsic call reads a contiguous 16x2 (bf16) / 16x4 (int8) block:
B[N, K] -> Bp[N/16, K/2, 16, 2] (bf16) or Bp[N/16, K/4, 16, 4] (int8); the activation row A[i, k:k+2]
(4 bytes) is broadcast to the 16 lanes. A schedule tensorizes the (j%16, k%2) loops of the reduction block,
by hand (``sch.tensorize``) or with ``ms.schedule_rule.MultiLevelTilingWithIntrin(intrin_name, ...)`` +
``ms.postproc.RewriteTensorize(vectorize_init_loop=True)``.

``packed_dense`` and ``tensorized_dense`` build and schedule such a dense by hand; ``lowp_dense`` is the kernel
that bf16 and int8 matmuls against constant weights become on a CPU with AVX512-BF16 / AVX512-VNNI and no AMX (a
graph rewrite, ``autosched.graph.amx``: weights packed by ``pack_lowp_weight`` at compile time; int8 activations
shifted to uint8 and the product corrected by a per-column constant). On Zen 5, one thread, 128 x 3072 x 768:
bf16 210 GFLOPS, int8 ~445 GOPS, against ~115 GFLOPS for the tuned float32 matmul. The search spaces do not use
these intrinsics.

Semantics of vdpbf16ps (per lane i): C[i] = C[i] + A[2i]*B[2i] + A[2i+1]*B[2i+1] in fp32, denormal
inputs/outputs flushed to zero, round-to-nearest-even; the ref twins accumulate in the same k order.
"""

from __future__ import annotations

from autosched._tvm import load_tensor_intrin_module, s_tir

BF16_DOT_16x2 = "dot_16x2_bf16_avx512"
BF16_DOT_16x2_REF = "dot_16x2_bf16_ref"
VNNI_DOT_16x4 = "dot_16x4_vnni"  # shipped by TVM 0.27 but broken with its LLVM 22 (see u8i8_vnni)
U8I8_DOT_16x4 = "dot_16x4_u8i8i32_vnni_llvm22"
U8I8_DOT_16x4_REF = "dot_16x4_u8i8i32_ref"

_DPBF16PS = "llvm.x86.avx512bf16.dpbf16ps.512"
_SHIM = "autosched_dpbf16ps_512"
# TVM's LLVM codegen cannot emit bfloat-typed values (bf16 storage is legalized to uint16; skipping
# the legalization segfaults codegen), but LLVM >= 18 declares dpbf16ps on <32 x bfloat>. So the
# intrinsic is called through this always-inlined shim, linked in with "pragma_import_llvm".
_SHIM_IR = f"""
define internal <16 x float> @{_SHIM}(<16 x float> %c, <16 x i32> %a, <16 x i32> %b) #0 {{
  %a2 = bitcast <16 x i32> %a to <32 x bfloat>
  %b2 = bitcast <16 x i32> %b to <32 x bfloat>
  %r = call <16 x float> @{_DPBF16PS}(<16 x float> %c, <32 x bfloat> %a2, <32 x bfloat> %b2)
  ret <16 x float> %r
}}
declare <16 x float> @{_DPBF16PS}(<16 x float>, <32 x bfloat>, <32 x bfloat>)
attributes #0 = {{ alwaysinline nounwind readnone }}
"""
_registered: dict[str, str] = {}


def _build() -> dict[str, tuple[object, object]]:
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def bf16_desc(A: T.Buffer((2,), "bfloat16", offset_factor=1),
                  B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
                  C: T.Buffer((16,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 2):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.Cast("float32", A[vk]) * T.Cast("float32", B[vi, vk])

    @T.prim_func(s_tir=True)
    def bf16_avx512(A: T.Buffer((2,), "bfloat16", offset_factor=1),
                    B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
                    C: T.Buffer((16,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            # bf16 operands travel as int32x16 (the legalize passes leave them alone) into a linked
            # LLVM IR shim that bitcasts them to <32 x bfloat>. No Python temporaries here: TVM 0.27
            # turns them into workspace-allocated buffers.
            with T.attr(T.int32(0), "pragma_import_llvm", _SHIM_IR):
                C[T.ramp(T.int32(0), 1, 16)] = T.call_pure_extern(
                    "float32x16", _SHIM,
                    C.vload([0], "float32x16"),
                    T.broadcast(T.reinterpret(A.vload([0], "bfloat16x2"), dtype="int32"), 16),
                    T.reinterpret(B.vload([0, 0], "bfloat16x32"), dtype="int32x16"))

    @T.prim_func(s_tir=True)
    def bf16_ref(A: T.Buffer((2,), "bfloat16", offset_factor=1),
                 B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
                 C: T.Buffer((16,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            Bf = T.decl_buffer((32,), "bfloat16", data=B.data, elem_offset=B.elem_offset)  # flat view
            C[T.ramp(T.int32(0), 1, 16)] = (
                C[T.ramp(T.int32(0), 1, 16)]
                + T.broadcast(T.Cast("float32", A[0]), 16) * T.Cast("float32x16", Bf[T.ramp(T.int32(0), 2, 16)])
            ) + T.broadcast(T.Cast("float32", A[1]), 16) * T.Cast("float32x16", Bf[T.ramp(T.int32(1), 2, 16)])

    @T.prim_func(s_tir=True)
    def u8i8_desc(A: T.Buffer((4,), "uint8", offset_factor=1),
                  B: T.Buffer((16, 4), "int8", offset_factor=1),
                  C: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.Cast("int32", A[vk]) * T.Cast("int32", B[vi, vk])

    @T.prim_func(s_tir=True)
    def u8i8_vnni(A: T.Buffer((4,), "uint8", offset_factor=1),
                  B: T.Buffer((16, 4), "int8", offset_factor=1),
                  C: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            # LLVM 22 declares vpdpbusd.512 on <64 x i8> operands (TVM's dot_16x4_vnni passes
            # <16 x i32> and fails LLVM's verifier); operand 2 is unsigned, operand 3 signed.
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                C.vload([0], "int32x16"),
                T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint8x4"), dtype="int32"), 16),
                              dtype="int8x64"),
                B.vload([0, 0], "int8x64"), dtype="int32x16")

    @T.prim_func(s_tir=True)
    def u8i8_ref(A: T.Buffer((4,), "uint8", offset_factor=1),
                 B: T.Buffer((16, 4), "int8", offset_factor=1),
                 C: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            Bf = T.decl_buffer((64,), "int8", data=B.data, elem_offset=B.elem_offset)  # flat view
            C[T.ramp(T.int32(0), 1, 16)] = C[T.ramp(T.int32(0), 1, 16)] + (
                (T.broadcast(T.Cast("int32", A[0]), 16) * T.Cast("int32x16", Bf[T.ramp(T.int32(0), 4, 16)])
                 + T.broadcast(T.Cast("int32", A[1]), 16) * T.Cast("int32x16", Bf[T.ramp(T.int32(1), 4, 16)]))
                + (T.broadcast(T.Cast("int32", A[2]), 16) * T.Cast("int32x16", Bf[T.ramp(T.int32(2), 4, 16)])
                   + T.broadcast(T.Cast("int32", A[3]), 16) * T.Cast("int32x16", Bf[T.ramp(T.int32(3), 4, 16)])))

    return {BF16_DOT_16x2: (bf16_desc, bf16_avx512), BF16_DOT_16x2_REF: (bf16_desc, bf16_ref),
            U8I8_DOT_16x4: (u8i8_desc, u8i8_vnni), U8I8_DOT_16x4_REF: (u8i8_desc, u8i8_ref)}


def register_lowp_intrins() -> dict[str, str]:
    """Register the intrinsics above (idempotent; also imports TVM's own x86 ones, ``dot_16x4_vnni``).

    Returns {role: intrin name}: roles "bf16", "bf16_ref", "int8" (VNNI), "int8_ref".
    """
    load_tensor_intrin_module("x86")  # registers dot_16x4_vnni / dot_16x4_avx512

    if not _registered:
        for name, (desc, impl) in _build().items():
            if s_tir.TensorIntrin.get(name, allow_missing=True) is None:
                s_tir.TensorIntrin.register(name, desc, impl)
        _registered.update(bf16=BF16_DOT_16x2, bf16_ref=BF16_DOT_16x2_REF, int8=U8I8_DOT_16x4,
                           int8_ref=U8I8_DOT_16x4_REF)
    return dict(_registered)


def builder_initializer() -> None:
    """``LocalBuilder(initializer=builder_initializer)``: fast TVMScript + intrinsics + bf16 pipeline."""
    from autosched._tvm import install_fast_inspect

    install_fast_inspect()
    register_lowp_intrins()


# kind -> A's, B's and C's dtypes and the values of k side by side in packed B
_PACKED_TYPES = {"bf16": ("bfloat16", "bfloat16", "float32", 2), "int8": ("uint8", "int8", "int32", 4)}


def packed_dense(m: int, n: int, k: int, kind: str) -> object:
    """C[m, n] = A[m, k] . B[n, k]^T with B packed as Bp[n/16, k/kk, 16, kk] (kk = 2 for ``bf16``: bf16 in,
    float32 out; 4 for ``int8``: u8 x s8, int32 out): the layout the intrinsics read."""
    from autosched._tvm import te, tvm

    a_dtype, b_dtype, acc, kk = _PACKED_TYPES[kind]
    a = te.placeholder((m, k), a_dtype, name="A")
    b = te.placeholder((n // 16, k // kk, 16, kk), b_dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype(acc) * b[j // 16, r // kk, j % 16, r % kk].astype(acc),
                                               axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def tensorized_dense(mod: object, intrin: str, kk: int, ti: int = 4, tj: int = 4, tk: int = 16,
                     parallel: bool = False) -> object:
    """A hand schedule of ``packed_dense``: a ``ti`` x ``tj`` grid of 16-lane accumulators kept in registers,
    the reduction's innermost (16, kk) block tensorized with ``intrin``. ``m`` must divide by ``ti``, ``n`` by
    16 x ``tj``, ``k`` by kk x ``tk`` (a predicated tile cannot be tensorized). ``parallel``: column panels
    outside row blocks (a panel of the weight stays in cache while every row block reads it), the two loops
    fused and parallel. Returns the schedule."""
    sch = s_tir.Schedule(mod)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, kk])
    i0, i1 = sch.split(i, [None, ti])
    j00, j01 = sch.split(j0, [None, tj])
    k00, k01 = sch.split(k0, [None, tk])
    if parallel:
        sch.reorder(j00, i0, k00, k01, i1, j01, j1, k1)
        sch.parallel(sch.fuse(j00, i0))
    else:
        sch.reorder(i0, j00, k00, k01, i1, j01, j1, k1)
    sch.decompose_reduction(block, k00)
    sch.vectorize(sch.get_loops(sch.get_sblock("C_init"))[-1])
    sch.unroll(i1)
    sch.unroll(j01)
    sch.tensorize(j1, intrin)
    return sch


# rows x 16-lane column vectors x k steps per kind: the best of a few on Zen 5 (one thread)
DENSE_TILES = {"bf16": (4, 2, 16), "int8": (4, 2, 8)}
_FEATURES = {"bf16": "avx512bf16", "int8": "avx512vnni"}
_INTRINS = {"bf16": BF16_DOT_16x2, "int8": U8I8_DOT_16x4}


def has_lowp_dense(target: object, kind: str) -> bool:
    """Whether ``target`` is an LLVM target with the instruction ``lowp_dense`` uses for ``kind``
    (AVX512-BF16's ``vdpbf16ps``, AVX512-VNNI's ``vpdpbusd``)."""
    from autosched._tvm import tvm

    if str(target.kind.name) != "llvm":
        return False
    return _FEATURES[kind] in {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target)}


def fits_lowp_dense(n: int, k: int, kind: str) -> bool:
    """Whether ``lowp_dense`` takes B[k, n] of ``kind`` (any number of rows of A)."""
    _, tj, tk = DENSE_TILES[kind]
    return n % (16 * tj) == 0 and k % (_PACKED_TYPES[kind][3] * tk) == 0


def lowp_dense(m: int, n: int, k: int, kind: str) -> object:
    """The kernel for C[m, n] = A[m, k] . B[k, n] with B packed by ``pack_lowp_weight`` (``fits_lowp_dense``):
    bf16 x bf16 -> float32 (``vdpbf16ps``), or uint8 x int8 -> int32 (``vpdpbusd``; A is unsigned). The
    ``DENSE_TILES`` accumulators in registers (fewer rows per tile where m is not a multiple of 4), one
    instruction per (16, 2 or 4) block, column panels x row blocks in parallel."""
    _, tj, tk = DENSE_TILES[kind]
    if not fits_lowp_dense(n, k, kind) or m < 1:
        raise ValueError(f"AVX-512 {kind} matmul {m}x{n}x{k}: n must be a multiple of {16 * tj} "
                         f"and k of {_PACKED_TYPES[kind][3] * tk}")
    register_lowp_intrins()
    ti = next(t for t in (DENSE_TILES[kind][0], 2, 1) if m % t == 0)
    kk = _PACKED_TYPES[kind][3]
    sch = tensorized_dense(packed_dense(m, n, k, kind), _INTRINS[kind], kk, ti, tj, tk, parallel=True)
    return sch.mod["main"].with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8)


def pack_lowp_weight(w: object, kind: str) -> object:
    """W[K, N] -> Wp[N/16, K/kk, 16, kk], the layout ``lowp_dense`` reads (kk = 2 bf16 / 4 int8 values of k
    side by side)."""
    from autosched.codegen.x86_amx import KINDS, pack_weight

    return pack_weight(w, KINDS[kind], block=16)
