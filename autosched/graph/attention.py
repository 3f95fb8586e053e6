"""Fused attention: softmax(Q Kᵀ · scale + mask) V as one kernel instead of three passes over the scores.

ONNX and PyTorch exporters write attention as matmul(Q, Kᵀ) -> [multiply or divide by a scale] -> [add a mask]
-> softmax over the last axis -> [where(isnan(p), 0, p), PyTorch's guard for fully masked rows] -> matmul(p, V),
the scale often folded into Q and Kᵀ beforehand, grouped-query heads already repeated to Q's head count. Unfused,
the scores tensor (batch x heads x queries x keys floats: 9 MB per head for 1500 frames) is written by the first
matmul, read and written by the softmax and read by the second: three passes over memory where a fused kernel keeps
a block of query rows' scores in cache. This pass (a graph rewrite, before legalization) replaces the pattern by one
call of a PrimFunc computing it in stages named ``attn_*`` (scores, max, exp, sum, weighted values, normalise), which
the CPU space schedules blockwise over query rows (``spaces/attention.py``): every stage of a block of rows runs
before the next block's, the rows' scores stay in cache, and the softmax is exact (the whole key row at once, not
an online rescaling: a key row of 1500 floats is 6 KB). Keys are padded to a multiple of 16 inside the function
(``padded_keys``), so every vector along them is whole.

Matched only where every shape is static, Q, Kᵀ and V share their leading (batch and head) dimensions, softmax is
over the last axis, the mask broadcasts to the scores, and everything is float32 with at least
``MIN_KEYS`` keys, outside ``UNFUSED_KEYS``; elsewhere the graph stays as it was (the unfused path).
"""

from __future__ import annotations

from typing import Any

from autosched._tvm import IRModule, relax, te, tirx, tvm

# Fewer keys: the three unfused kernels are as fast (16 keys x 16 queries, d 64, 384 heads, 2 threads: 0.81 ms fused,
# 0.78 unfused); from 49 keys on the fused kernel wins (Swin's windows, 256 x 49 x 49, d 32: 2.4-3.3 ms against 5.8)
MIN_KEYS = 32
# Between these, fused was faster too on default schedules (32 x 77 x 77, d 64: 1.07 ms against 1.55; 4 x 128 x 128:
# 0.19 against 0.28; ViT's 12 x 197 x 197: 2.8 against 10.5), but the shipped example logs (GPT 64, BERT 128, ViT 197
# tokens, tuned on CPUs this machine is not) hold tuned records for the unfused path only: those rows stay unfused
# until the logs are tuned again with the fused form.
UNFUSED_KEYS = range(64, 256)


def _pattern() -> tuple[Any, dict[str, Any]]:
    from tvm.relax.dpl import is_const, is_op, wildcard

    q, k, v, mask, scale, fill, fill2, neg_inf = (wildcard(), wildcard(), wildcard(), wildcard(), is_const(),
                                                  is_const(), is_const(), is_const())
    scores = is_op("relax.matmul")(q, k)
    scores_r = scores | is_op("relax.reshape")(scores, wildcard())  # [B*H, Sq, Sk] -> [B, H, Sq, Sk]
    scaled = scores_r | is_op("relax.multiply")(scores_r, scale) | is_op("relax.divide")(scores_r, scale)
    logits = scaled | is_op("relax.add")(scaled, mask)
    probs = is_op("relax.nn.softmax")(logits)
    # PyTorch's guards for fully masked rows: where(isnan(p), 0, p), or where(no key of the row is above -inf, 0, p)
    nan_guard = is_op("relax.where")(is_op("relax.isnan")(probs), fill, probs)
    unmasked = is_op("relax.logical_not")(is_op("relax.equal")(logits, neg_inf))  # the same logits (one match)
    row_masked = is_op("relax.logical_not")(is_op("relax.astype")(is_op("relax.max")(is_op("relax.astype")(unmasked))))
    row_guard = is_op("relax.where")(row_masked, fill2, probs)
    guarded = probs | nan_guard | row_guard
    spread = guarded | is_op("relax.broadcast_to")(guarded, wildcard())
    flat = spread | is_op("relax.reshape")(spread, wildcard())  # back to the matmul's [B*H, Sq, Sk]
    out = is_op("relax.matmul")(flat, v)
    return out, {"q": q, "k": k, "v": v, "mask": mask, "scale": scale, "fill": fill, "fill2": fill2,
                 "neg_inf": neg_inf, "scaled": scaled, "logits": logits, "probs": probs, "nan_guard": nan_guard,
                 "row_guard": row_guard, "unmasked": unmasked, "spread": spread, "flat": flat, "out": out}


def _static(expr: Any) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of a tensor of static shape; None otherwise."""
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    try:
        return tuple(int(d) for d in shape.values), str(ty.dtype)
    except (TypeError, ValueError):
        return None


def _scalar(const: Any) -> float | None:
    value = const.value.numpy()
    return float(value.reshape(())) if value.size == 1 else None


def _zeros(const: Any) -> bool:
    """A constant of zeros only (a scalar, or zeros_like folded into a whole tensor)."""
    value = const.value.numpy()
    return value.size > 0 and not value.any()


FORM_ATTR, FORM = "autosched.attention_form", 2  # 2: padded keys and rows, register-blocked (spaces/attention.py)
ROW_MULTIPLE = 8  # query rows are padded to a multiple of this where no register tile of rows divides them
KEY_MULTIPLE = 16  # key rows are computed padded to a multiple of this (AVX-512's float32 lanes)


def padded_keys(n_keys: int) -> int:
    """The keys the fused function's scores and softmax run over: ``n_keys`` rounded up to ``KEY_MULTIPLE``. LLVM
    splits a vector of 49 or 60 lanes into single lanes (Q·Kᵀ of 49 keys ran 5 GFLOPS in runs of 49 lanes, 30 in
    runs of 7), while padded keys cost only their share of Q·Kᵀ and of the softmax (P·V reduces over the real
    keys)."""
    return -(-n_keys // KEY_MULTIPLE) * KEY_MULTIPLE


def padded_queries(n_queries: int) -> int:
    """The query rows the fused function computes: ``n_queries`` where 4 to 8 of them divide it (a register tile of
    rows), else rounded up to a multiple of 8 (ViT's 197 tokens: 200; a prime count would leave tiles of one
    row), the padded rows repeating the last query and cropped from the output."""
    if n_queries < ROW_MULTIPLE or any(n_queries % r == 0 for r in range(4, ROW_MULTIPLE + 1)):
        return n_queries
    return -(-n_queries // ROW_MULTIPLE) * ROW_MULTIPLE


def attention_func(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], mask: tuple[int, ...] | None,
                   scale: float | None, divide: bool, nan_guard: bool) -> tirx.PrimFunc:
    """The fused PrimFunc: ``out = softmax(q @ k · scale + mask) @ v`` for Q [..., Sq, D], Kᵀ [..., D, Sk],
    V [..., Sk, Dv] and a mask that broadcasts to [..., Sq, Sk]; its stages are the ``attn_*`` blocks. Where Sk is
    not a multiple of ``KEY_MULTIPLE``, ``attn_kpad`` copies Kᵀ padded with zero keys and the padded keys' logits
    are -inf (their probabilities 0); where the query rows are padded (``padded_queries``), ``attn_crop`` copies the
    real rows to the output."""
    *batch, n_q, depth = q
    n_k, n_v = k[-1], v[-1]
    n_qp, n_kp = padded_queries(n_q), padded_keys(n_k)
    Q, K, V = (te.placeholder(s, "float32", name=n) for s, n in ((q, "q"), (k, "k"), (v, "v")))
    M = None if mask is None else te.placeholder(mask, "float32", name="mask")
    Kp = K if n_kp == n_k else te.compute(
        (*batch, depth, n_kp), lambda *i: tvm.tirx.Select(
            i[-1] < n_k, K[(*i[:-1], _clamp(i[-1], n_k))], tvm.tirx.const(0.0, "float32")), name="attn_kpad")
    d = te.reduce_axis((0, depth), "d")
    row = (lambda i: i) if n_qp == n_q else (lambda i: _clamp(i, n_q))  # a padded row repeats the last query
    scores = te.compute((*batch, n_qp, n_kp), lambda *i: te.sum(
        Q[(*i[:-2], row(i[-2]), d)] * Kp[(*i[:-2], d, i[-1])], axis=d), name="attn_scores")
    logits = te.compute((*batch, n_qp, n_kp), _logit(scores, M, mask, scale, divide, (n_q, n_k), len(q)),
                        name="attn_logits")
    j = te.reduce_axis((0, n_kp), "j")
    row_max = te.compute((*batch, n_qp), lambda *i: te.max(logits[(*i, j)], axis=j), name="attn_max")
    exp = te.compute((*batch, n_qp, n_kp), lambda *i: te.exp(logits[i] - row_max[i[:-1]]), name="attn_exp")
    j2 = te.reduce_axis((0, n_kp), "j2")
    row_sum = te.compute((*batch, n_qp), lambda *i: te.sum(exp[(*i, j2)], axis=j2), name="attn_sum")
    j3 = te.reduce_axis((0, n_k), "j3")
    acc = te.compute((*batch, n_qp, n_v), lambda *i: te.sum(exp[(*i[:-1], j3)] * V[(*i[:-2], j3, i[-1])], axis=j3),
                     name="attn_acc")

    def normalise(*i: Any) -> Any:
        x = acc[i] / row_sum[i[:-1]]
        return tvm.tirx.Select(tvm.tirx.isnan(x), tvm.tirx.const(0.0, "float32"), x) if nan_guard else x

    out = te.compute((*batch, n_qp, n_v), normalise, name="attn_out")
    if n_qp != n_q:
        out = te.compute((*batch, n_q, n_v), lambda *i: out[i], name="attn_crop")
    inputs = [Q, K, *([] if M is None else [M]), V]
    func = te.create_prim_func([*inputs, out]).with_attr("op_pattern", 8)  # opaque: a group of its own
    # in the task key (the structural hash): records of an earlier form of the function or its design stay apart
    func = func.with_attr(FORM_ATTR, FORM)
    return func.without_attr("global_symbol")  # named by the module it is added to


def _clamp(index: Any, extent: int) -> Any:
    """``index`` where it may run past ``extent`` (a padded row or key) clamped to the last one: read, not used."""
    return tvm.tirx.min(index, extent - 1)


def _logit(scores: Any, M: Any, mask: tuple[int, ...] | None, scale: float | None, divide: bool,
           real: tuple[int, int], rank: int) -> Any:
    """The logits' compute rule: scores scaled, plus the mask (broadcast: a dimension of 1 reads index 0, the mask's
    leading dimensions align right), -inf at padded keys; ``real``: the (queries, keys) before padding."""
    padded = (int(scores.shape[-2]), int(scores.shape[-1]))

    def logit(*i: Any) -> Any:
        x = scores[i]
        if scale is not None:
            x = x / tvm.tirx.const(scale, "float32") if divide else x * tvm.tirx.const(scale, "float32")
        if M is not None:
            offset = rank - len(mask)
            index = [0 if mask[a] == 1 else i[a + offset] for a in range(len(mask))]
            for axis, extent, computed in zip((-2, -1), real, padded, strict=True):
                if len(mask) >= -axis and mask[axis] != 1 and computed != extent:
                    index[axis] = _clamp(i[axis], extent)
            x = x + M[tuple(index)]
        if padded[1] != real[1]:
            x = tvm.tirx.Select(i[-1] < real[1], x, tvm.tirx.const(float("-inf"), "float32"))
        return x

    return logit


def _product(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _rewriter(builder: Any, parts: dict[str, Any]) -> Any:
    def rewrite(expr: Any, matched: dict[Any, Any]) -> Any:
        q, k, v, probs, out = (_static(matched[parts[n]]) for n in ("q", "k", "v", "probs", "out"))
        if None in (q, k, v, probs, out) or {q[1], k[1], v[1], probs[1]} != {"float32"}:
            return expr
        (q, _), (k, _), (v, _), (probs, _), (out, _) = q, k, v, probs, out
        lead = probs[:-2]  # the softmax's leading (batch, head) dimensions: the fused kernel's
        if not (len(q) == len(k) == len(v) >= 2 and q[:-2] == k[:-2] == v[:-2] and _product(q[:-2]) == _product(lead)
                and probs[-2:] == (q[-2], k[-1]) and q[-1] == k[-2] and k[-1] == v[-2] and k[-1] >= MIN_KEYS
                and k[-1] not in UNFUSED_KEYS
                and out[-2:] == (q[-2], v[-1]) and int(matched[parts["probs"]].attrs.axis) in (-1, len(probs) - 1)):
            return expr
        if parts["spread"] in matched and _static(matched[parts["spread"]])[0] != probs:
            return expr  # a broadcast that repeats the probabilities
        mask = matched.get(parts["mask"])
        mask_shape = None
        if mask is not None:
            found = _static(mask)
            if found is None or found[1] != "float32" or len(found[0]) > len(probs) or any(
                    m not in (1, s) for m, s in zip(reversed(found[0]), reversed(probs), strict=False)):
                return expr
            mask_shape = found[0]
        scale, divide = None, False
        if parts["scale"] in matched:
            scale = _scalar(matched[parts["scale"]])
            if scale is None:
                return expr
            divide = matched[parts["scaled"]].op.name == "relax.divide"
        guard = parts["nan_guard"] in matched or parts["row_guard"] in matched
        if parts["nan_guard"] in matched and not _zeros(matched[parts["fill"]]):
            return expr
        if parts["row_guard"] in matched and (
                not _zeros(matched[parts["fill2"]]) or _scalar(matched[parts["neg_inf"]]) != float("-inf")):
            return expr
        q4, k4, v4 = (*lead, *q[-2:]), (*lead, *k[-2:]), (*lead, *v[-2:])
        func = attention_func(q4, k4, v4, mask_shape, scale, divide, guard)
        gv = builder.add_func(func, "fused_attention")
        args = [relax.op.reshape(matched[parts[n]], s) if s != shape else matched[parts[n]]
                for n, s, shape in (("q", q4, q), ("k", k4, k))]
        args += [*([mask] if mask is not None else []),
                 relax.op.reshape(matched[parts["v"]], v4) if v4 != v else matched[parts["v"]]]
        fused = relax.call_tir(gv, args, relax.TensorType((*lead, q[-2], v[-1]), "float32"))
        return relax.op.reshape(fused, out) if out != (*lead, q[-2], v[-1]) else fused

    return rewrite


@tvm.transform.module_pass(opt_level=0, name="FuseAttention")
def fuse_attention(mod: IRModule, ctx: Any) -> IRModule:
    """Every matched attention of the module's Relax functions as one call of its fused PrimFunc."""
    from tvm.relax.dpl import rewrite_call

    pattern, parts = _pattern()
    builder = relax.BlockBuilder(mod)
    rewritten = {gv: rewrite_call(pattern, _rewriter(builder, parts), func)
                 for gv, func in mod.functions_items() if isinstance(func, relax.Function)}
    out = builder.get()
    for gv, func in rewritten.items():
        out[gv] = func
    return out
