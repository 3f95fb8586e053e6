"""Model import: ONNX files, PyTorch modules (torch.export) and Relax IRModules -> one Relax IRModule.

Weights become constants (so constant folding can precompute them); input shapes come from the model or
from ``--input name:1x3x224x224``. Every user mistake is a one-line ``UserInputError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosched._tvm import IRModule
from autosched.errors import GraphError, UserInputError


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def random(self, rng: np.random.Generator) -> np.ndarray:
        if np.issubdtype(np.dtype(self.dtype), np.floating):
            return rng.standard_normal(self.shape).astype(self.dtype)
        return np.zeros(self.shape, self.dtype)  # indices: zero is valid for any table


@dataclass
class Model:
    """A model ready for the graph rewrites: Relax module (entry ``main``), its inputs, where it came from."""

    name: str
    mod: IRModule
    inputs: list[InputSpec]
    source: str  # "onnx" | "torch" | "relax"
    onnx_bytes: bytes | None = None  # the ONNX model, for ONNX Runtime as the reference
    entry: str = "main"  # the graph function to call
    info: dict[str, Any] = field(default_factory=dict)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [spec.random(rng) for spec in self.inputs]


_SPEC = re.compile(r"^([^:]+):(\d+(?:[x,]\d+)*)$")


def parse_input_shapes(texts: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x:1x3x224x224", "mask:1,128"]`` -> ``{"x": (1, 3, 224, 224), "mask": (1, 128)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts or []:
        m = _SPEC.match(text.strip())
        if not m:
            raise UserInputError(f"bad --input {text!r}: write NAME:DIMS, e.g. --input x:1x3x224x224")
        dims = tuple(int(d) for d in re.split(r"[x,]", m.group(2)))
        if any(d < 1 for d in dims):
            raise UserInputError(f"bad --input {text!r}: every dimension must be at least 1")
        shapes[m.group(1)] = dims
    return shapes


def load_model(source: Any, input_shapes: dict[str, tuple[int, ...]] | None = None,
               example_inputs: tuple | None = None, name: str | None = None, fold_onnx_graph: bool = True) -> Model:
    """An ONNX path or ModelProto, a ``torch.nn.Module`` (with ``example_inputs``) or a Relax IRModule.
    ``fold_onnx_graph``: ONNX models get ONNX Runtime's constant and shape folding first (``fold_onnx``)."""
    if isinstance(source, (str, Path)):
        return _load_onnx_file(Path(source), input_shapes or {}, name, fold_onnx_graph)
    if isinstance(source, IRModule):
        return _from_relax(source, name or "relax_module")
    if type(source).__name__ == "ModelProto":
        return _from_onnx(source, input_shapes or {}, name or (source.graph.name or "onnx_model"), fold_onnx_graph)
    if _is_torch_module(source):
        if example_inputs is None:
            raise UserInputError("a PyTorch module needs example_inputs=(tensor, ...) to export it")
        return _from_torch(source, tuple(example_inputs), name or type(source).__name__)
    raise UserInputError(f"cannot load a model from {type(source).__name__}: give an ONNX file path, an "
                         "onnx.ModelProto, a torch.nn.Module or a Relax IRModule")


# --- ONNX ------------------------------------------------------------------------------------------------
def _load_onnx_file(path: Path, input_shapes: dict[str, tuple[int, ...]], name: str | None, fold: bool) -> Model:
    if not path.exists():
        raise UserInputError(f"model file {path} does not exist: check the path")
    if path.is_dir():
        raise UserInputError(f"{path} is a folder: give the path of an .onnx file")
    onnx = _import_onnx()
    try:
        proto = onnx.load(str(path))
    except Exception as err:  # protobuf DecodeError and friends
        raise UserInputError(f"{path} is not an ONNX model ({type(err).__name__}): give a .onnx file, e.g. "
                             "one written by torch.onnx.export") from err
    if not proto.graph.node:
        raise UserInputError(f"{path} is not an ONNX model (no graph nodes): give a .onnx file")
    return _from_onnx(proto, input_shapes, name or path.stem, fold)


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError as err:
        raise UserInputError("reading ONNX models needs the onnx extra: pip install 'autosched[onnx]'") from err
    return onnx


def onnx_input_dims(proto: Any) -> dict[str, tuple[list[int | str], str]]:
    """Graph inputs that are not initializers: name -> (dims, int or symbol name; numpy dtype)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    weights = {init.name for init in proto.graph.initializer}
    out = {}
    for value in proto.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
                for d in tensor.shape.dim]
        try:
            dtype = str(np.dtype(tensor_dtype_to_np_dtype(tensor.elem_type)))
        except (KeyError, TypeError, ValueError) as err:
            raise UserInputError(f"the ONNX model's input {value.name!r} has no valid element type "
                                 f"(elem_type {tensor.elem_type}): re-export the model") from err
        out[value.name] = (dims, dtype)
    return out


def _resolve_inputs(declared: dict[str, tuple[list[int | str], str]],
                    given: dict[str, tuple[int, ...]]) -> list[InputSpec]:
    for name in given:
        if name not in declared:
            raise UserInputError(f"unknown input {name!r} in --input: the model's inputs are "
                                 f"{', '.join(declared) or '(none)'}")
    specs = []
    for name, (dims, dtype) in declared.items():
        shown = "x".join(str(d) for d in dims)
        if name in given:
            shape = given[name]
            if len(shape) != len(dims):
                raise UserInputError(f"--input {name}:{'x'.join(map(str, shape))} has rank {len(shape)} but "
                                     f"input {name!r} has rank {len(dims)} ({shown})")
            for want, got in zip(dims, shape, strict=True):
                if isinstance(want, int) and want != got:
                    raise UserInputError(f"--input {name}:{'x'.join(map(str, shape))} does not match the "
                                         f"model's fixed shape {shown}: change only the unknown dimensions")
        elif all(isinstance(d, int) for d in dims):
            shape = tuple(int(d) for d in dims)
        else:
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
            raise UserInputError(f"input {name!r} has unknown dimensions ({shown}): give its shape with "
                                 f"--input {name}:{example}")
        specs.append(InputSpec(name, tuple(shape), dtype))
    return specs


def _from_onnx(proto: Any, input_shapes: dict[str, tuple[int, ...]], name: str, fold: bool = True) -> Model:
    onnx = _import_onnx()
    try:
        onnx.checker.check_model(proto)
    except Exception as err:
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise UserInputError(f"model {name!r} is a corrupt ONNX model: {first}") from err
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    supported = _get_convert_map()
    unsupported = sorted({n.op_type for n in proto.graph.node if n.op_type not in supported})
    if unsupported:
        raise UserInputError(f"model {name!r} uses operators TVM's ONNX importer does not support: "
                             f"{', '.join(unsupported)}")
    specs = _resolve_inputs(onnx_input_dims(proto), input_shapes)
    fallbacks: list = []
    folded = fold_onnx(proto, specs, fallbacks) if fold else proto
    try:
        mod = from_onnx(folded, shape_dict={s.name: list(s.shape) for s in specs},
                        dtype_dict={s.name: s.dtype for s in specs}, keep_params_in_input=False)
    except Exception as err:
        raise GraphError(f"TVM's ONNX importer failed on {name!r}: {_first_line(err)}") from err
    return Model(name, mod, specs, "onnx", proto.SerializeToString(),
                 info={"opset": _opset(proto), "fallbacks": fallbacks, "onnx_nodes": (len(proto.graph.node),
                       len(folded.graph.node)), "output_names": [o.name for o in proto.graph.output]})


ONNX_FOLD = "fold ONNX constants and shapes (ONNX Runtime, basic level)"


def fold_onnx(proto: Any, specs: list[InputSpec], fallbacks: list | None = None) -> Any:
    """The ONNX graph with its inputs fixed to ``specs`` and ONNX Runtime's basic (standard-operator) graph
    optimizations applied: constant and shape subgraphs folded (Shape -> Gather -> Concat -> Reshape chains
    that exporters write for ``view``/``chunk``), batch norms folded into convolutions, identities removed.
    TVM's importer turns unfolded shape arithmetic into dynamic-shape operators that its rewrites cannot
    handle. On any failure, or if the result uses non-standard operators, the graph is returned as it was."""
    from autosched.graph.passes import Fallback, failure_reason

    fixed = type(proto)()
    fixed.CopyFrom(proto)
    for value in fixed.graph.input:
        spec = next((s for s in specs if s.name == value.name), None)
        if spec is not None:
            for dim, size in zip(value.type.tensor_type.shape.dim, spec.shape, strict=True):
                dim.Clear()
                dim.dim_value = size
    try:
        import onnx
        import onnxruntime as ort

        from autosched.scratch import scratch_dir

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.log_severity_level = 3
        with scratch_dir("onnx") as tmp:
            options.optimized_model_filepath = f"{tmp}/folded.onnx"
            ort.InferenceSession(fixed.SerializeToString(), options, providers=["CPUExecutionProvider"])
            folded = onnx.load(options.optimized_model_filepath)
    except Exception as err:  # no onnxruntime, or a model it cannot load: TVM imports the graph as it is
        if fallbacks is not None:
            fallbacks.append(Fallback(ONNX_FOLD, failure_reason(err)))
        return fixed
    foreign = sorted({f"{n.domain}.{n.op_type}" for n in folded.graph.node if n.domain not in ("", "ai.onnx")})
    if foreign:
        if fallbacks is not None:
            fallbacks.append(Fallback(ONNX_FOLD, f"it introduced non-standard operators {', '.join(foreign[:3])}"))
        return fixed
    return folded


def _first_line(err: BaseException) -> str:
    from autosched.graph.passes import failure_reason

    return failure_reason(err)


def _opset(proto: Any) -> int:
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


# --- PyTorch ---------------------------------------------------------------------------------------------
def _is_torch_module(obj: Any) -> bool:
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(obj).__mro__)


def _from_torch(module: Any, example_inputs: tuple, name: str) -> Model:
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    module = module.eval()
    try:
        with torch.no_grad():
            program = torch.export.export(module, example_inputs)
    except Exception as err:
        raise UserInputError(f"torch.export cannot trace {name!r}: {_first_line(err)}; make the module "
                             "exportable (see torch.export's docs) or export it to ONNX") from err
    _drop_legacy_empty_cat_inputs(program)
    try:
        mod = from_exported_program(program, keep_params_as_input=False)
    except Exception as err:
        raise GraphError(f"TVM's PyTorch importer failed on {name!r}: {_first_line(err)}") from err
    specs = [InputSpec(f"input{i}", tuple(t.shape), str(t.numpy().dtype)) for i, t in enumerate(example_inputs)]
    signature = program.graph_signature  # inputs and buffers the module writes to (the importer drops the writes)
    mutated = sorted({*signature.buffers_to_mutate.values(), *signature.user_inputs_to_mutate.values()})
    return Model(name, mod, specs, "torch", info={"torch_module": module, "mutated_inputs": mutated})


def _drop_legacy_empty_cat_inputs(program: Any) -> None:
    """``torch.cat`` skips 1-D empty tensors whatever the others' rank (a legacy rule that Hugging Face's
    key-value cache relies on: its first step concatenates ``torch.tensor([])`` with the keys); TVM's importer
    refuses them ("Concat expects all input tensors to have same ndim"). Drop them from the program's cats."""
    import torch

    changed = False
    for node in list(program.graph_module.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
            continue
        parts = list(node.args[0])
        vals = [getattr(p, "meta", {}).get("val") for p in parts]
        kept = [p for p, v in zip(parts, vals, strict=True) if not (v is not None and v.dim() == 1 and v.numel() == 0)]
        if len(kept) == len(parts) or not kept or all(v is not None and v.dim() == 1 for v in vals):
            continue
        node.args = (kept, *node.args[1:])
        changed = True
    if changed:
        program.graph_module.graph.eliminate_dead_code()
        program.graph_module.recompile()


# --- Relax -----------------------------------------------------------------------------------------------
def _from_relax(mod: IRModule, name: str) -> Model:
    entries = [gv.name_hint for gv, f in mod.functions.items()
               if type(f).__name__ == "Function" and not int((f.attrs or {}).get("Primitive", 0))]
    entry = "main" if "main" in entries else (entries[0] if len(entries) == 1 else None)
    if entry is None:
        raise UserInputError(f"cannot tell the entry function of this Relax module ({', '.join(entries) or 'none'}):"
                             " name it 'main'")
    specs = []
    for param in mod[entry].params:
        info = param.ty  # TVM 0.27: struct_info became ty (relax.TensorType)
        if type(info).__name__ != "TensorType" or info.shape is None:
            raise UserInputError(f"input {param.name!r} of main is not a tensor of known rank")
        try:
            shape = tuple(int(d) for d in getattr(info.shape, "values", info.shape))
        except TypeError as err:
            raise UserInputError(f"input {param.name!r} has symbolic dimensions: bind them first "
                                 "(relax.transform.BindSymbolicVars)") from err
        specs.append(InputSpec(param.name, shape, str(info.dtype)))
    return Model(name, mod, specs, "relax", entry=entry)
