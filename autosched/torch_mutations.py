"""In-place writes in a graph dynamo captured, made functional so that TVM can build it: ``x.add_(y)`` becomes
``x2 = x.add(y)`` with every later use of ``x`` reading ``x2``; ``x.index_copy_(dim, index, source)`` (how Hugging
Face's static KV cache writes a step's keys and values) becomes a ``where`` over the positions written, which TVM's
PyTorch importer takes (its ``index_put`` needs an index tensor for every dimension).

A graph input written this way is returned as one more output, and the backend copies it back into the caller's
tensor after the call (``mutated``). Writes through views of an input, or by operators without a functional
counterpart, are left as they are (the backend then runs the graph eagerly, saying so).
"""

from __future__ import annotations

from typing import Any

VIEWS = {  # ops whose output is a view of their first argument
    "view",
    "reshape",
    "transpose",
    "permute",
    "getitem",
    "select",
    "narrow",
    "unsqueeze",
    "squeeze",
    "expand",
    "t",
    "flatten",
    "unflatten",
    "view_as",
    "as_strided",
    "detach",
    "chunk",
    "split",
    "unbind",
    "movedim",
    "swapaxes",
    "diagonal",
    "__getitem__",
}

def index_copy(x: Any, dim: int, index: Any, source: Any) -> Any:
    """``x.index_copy(dim, index, source)`` from ``arange``, ``==``, ``argmax``, ``index_select`` and ``where``:
    exact (no arithmetic on the values)."""
    import torch

    dim = dim % x.dim()
    n = x.shape[dim]
    hits = torch.arange(n, device=x.device).unsqueeze(1) == index.reshape(1, -1)  # (n, len(index))
    written = hits.any(dim=1)
    which = hits.to(torch.int32).argmax(dim=1)  # the position in ``source`` that each written row comes from
    gathered = source.index_select(dim, which)
    shape = [1] * x.dim()
    shape[dim] = n
    return torch.where(written.reshape(shape), gathered, x)


_SPECIAL = {"index_copy_": index_copy}


def functionalize(gm: Any) -> tuple[Any, list[int]] | None:
    """A copy of ``gm`` without in-place writes and the positions of the inputs it wrote (their new values are
    its last outputs, in that order); None when ``gm`` writes nothing this rewrites (``gm`` itself then serves)."""
    import copy

    import torch

    new_gm = copy.deepcopy(gm)
    graph = new_gm.graph
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    latest: dict[Any, Any] = {}  # a tensor written to -> the node holding its value now
    changed = False
    for node in nodes:
        name = node.target if node.op == "call_method" else ""
        if not (isinstance(name, str) and name.endswith("_") and not name.startswith("_") and node.args):
            continue
        target = node.args[0]
        functional = _SPECIAL.get(name) or (getattr(torch.Tensor, name[:-1], None) and name[:-1])
        if not functional or not hasattr(target, "op") or _is_view(target):
            continue
        with graph.inserting_after(node):
            if callable(functional):
                value = graph.call_function(functional, tuple(node.args), dict(node.kwargs))
            else:
                value = graph.call_method(functional, tuple(node.args), dict(node.kwargs))
        value.meta = dict(node.meta)
        order = {n: i for i, n in enumerate(graph.nodes)}
        for old in (node, target):  # the write's result is ``target`` itself
            for user in list(old.users):
                if user is not value and order[user] > order[value]:
                    user.replace_input_with(old, value)
        graph.erase_node(node)
        root = _root(target, latest)
        latest[root] = value
        changed = True
    if not changed:
        return None
    written = [i for i, p in enumerate(placeholders) if p in latest]
    output = next(n for n in graph.nodes if n.op == "output")
    result = output.args[0]
    output.args = ((result, tuple(latest[placeholders[i]] for i in written)),)
    graph.lint()
    new_gm.recompile()
    return new_gm, written


def _root(node: Any, latest: dict[Any, Any]) -> Any:
    for root, value in latest.items():
        if value is node:
            return root
    return node


def _is_view(node: Any) -> bool:
    """Whether ``node`` may be a view of another tensor (a write to it would reach that one)."""

    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    return node.op in ("call_method", "call_function") and name in VIEWS
