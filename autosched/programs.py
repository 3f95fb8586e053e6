"""Any tensor program as a task: a TE compute, a TIR PrimFunc, an IRModule with one PrimFunc, or a Relax module.

A TE compute or a PrimFunc becomes one task (``program_task``), tuned, stored and reloaded like a catalog
operator: its unscheduled build is the reference its candidates are checked against, and its key is the
one ``autosched show``, ``best_module`` and ``load_kernel`` use. A Relax IRModule is a model: the graph
rewrites, then one task per fusion group (``tune_model``'s path). Whatever cannot be tuned is refused
with one line naming the construct (``UserInputError``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autosched._tvm import IRModule, PrimFunc, Target, relax, te, tvm, tvm_ffi
from autosched.config import DEFAULT_DATABASE, TuneConfig
from autosched.db import Database
from autosched.errors import UserInputError
from autosched.native_log import quiet_api
from autosched.spaces.settings import settings_for
from autosched.tasks import Task, primfunc_task

ACCEPTED = ("a TE tensor or list of tensors, a TIR PrimFunc, an IRModule holding one PrimFunc, or a Relax "
            "IRModule")
# Calls into code the scheduler cannot see (their effects are not in the blocks' reads and writes).
OPAQUE_CALLS = frozenset({"tirx.tvm_call_packed", "tirx.tvm_call_cpacked", "tirx.tvm_call_packed_lowered",
                          "tirx.tvm_call_cpacked_lowered", "tirx.call_extern"})
_SKIPPED_FIELDS = frozenset({"span", "ty", "ret_type", "attrs", "annotations"})


# --- what kind of program ---------------------------------------------------------------------------------
def is_relax_module(obj: Any) -> bool:
    return isinstance(obj, IRModule) and any(isinstance(f, relax.Function) for _, f in obj.functions_items())


def as_primfunc(obj: Any) -> tuple[PrimFunc, str]:
    """(the PrimFunc, a name for it) from a TE tensor or tensors, a PrimFunc, or an IRModule with one PrimFunc."""
    if isinstance(obj, te.Tensor) or (isinstance(obj, (list, tuple)) and obj):
        tensors = [obj] if isinstance(obj, te.Tensor) else list(obj)
        bad = [type(t).__name__ for t in tensors if not isinstance(t, te.Tensor)]
        if bad:
            raise UserInputError(f"cannot tune a list holding {', '.join(sorted(set(bad)))}: a list must hold "
                                 "TE tensors only (inputs, then outputs)")
        return _te_primfunc(tensors), tensors[-1].op.name
    if isinstance(obj, PrimFunc):
        symbol = obj.attrs.get("global_symbol", "main") if obj.attrs is not None else "main"
        return obj, str(symbol)
    if isinstance(obj, IRModule):
        items = obj.functions_items()
        funcs = [(gv.name_hint, f) for gv, f in items if isinstance(f, PrimFunc)]
        others = sorted({type(f).__name__ for _, f in items if not isinstance(f, PrimFunc)})
        if others:
            raise UserInputError(f"IRModule with {', '.join(others)} functions: give one PrimFunc or a Relax module")
        if len(funcs) != 1:
            names = ", ".join(n for n, _ in funcs) or "none"
            raise UserInputError(f"IRModule holds {len(funcs)} PrimFuncs ({names}): give a module with exactly one")
        return funcs[0][1], funcs[0][0]
    raise UserInputError(f"cannot tune an object of type {type(obj).__name__}: give {ACCEPTED}")


def _te_primfunc(tensors: list) -> PrimFunc:
    """``te.create_prim_func``; outputs alone get their placeholder inputs put in front (in order of use)."""
    used = _placeholders([t for t in tensors if not isinstance(t.op, te.PlaceholderOp)])
    if not any(isinstance(t.op, te.PlaceholderOp) for t in tensors):
        tensors = used + tensors
    missing = [t.op.name for t in used if not any(t.same_as(g) for g in tensors)]
    if missing:
        raise UserInputError(f"input {missing[0]} is used but not in the list: give every input, then the outputs "
                             "(or the outputs alone)")
    try:
        return te.create_prim_func(tensors)
    except (RuntimeError, ValueError, TypeError) as err:
        raise UserInputError(f"te.create_prim_func cannot turn these tensors into a PrimFunc: {_first_line(err)}"
                             ) from err


def _placeholders(outputs: list) -> list:
    found: list = []
    stack = list(reversed(outputs))
    while stack:
        tensor = stack.pop()
        if isinstance(tensor.op, te.PlaceholderOp):
            if not any(tensor.same_as(f) for f in found):
                found.append(tensor)
            continue
        stack.extend(reversed(list(tensor.op.input_tensors)))
    return found


# --- what the scheduler can handle ------------------------------------------------------------------------
def _fields(cls: type) -> list[str]:
    names, info = [], getattr(cls, "__tvm_ffi_type_info__", None)
    while info is not None:
        names += [f.name for f in info.fields]
        info = info.parent_type_info
    return names


def walk(node: Any, visit: Callable[[Any], None]) -> None:
    """Call ``visit`` once on every IR node under ``node`` (statements and expressions, by reflection:
    TVM 0.27 has no TIR visitor in Python)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (list, tuple)) or type(n).__name__ in ("Array", "List"):
            stack.extend(n)
            continue
        if not isinstance(n, tvm_ffi.core.Object) or n.__chandle__() in seen:
            continue
        seen.add(n.__chandle__())
        visit(n)
        stack.extend(getattr(n, f) for f in _fields(type(n)) if f not in _SKIPPED_FIELDS)


def check_primfunc(func: PrimFunc) -> int:
    """The number of outputs (the written buffer arguments, last in the list); ``UserInputError`` naming the
    first construct the tuner cannot handle."""
    _check_params(func)
    blocks, stored, calls = 0, [], []

    def visit(node: Any) -> None:
        nonlocal blocks
        kind = type(node).__name__
        if kind == "SBlock" and node.name_hint != "root":
            blocks += 1
        elif kind == "BufferStore":
            stored.append(node.buffer)
        elif kind == "Call" and isinstance(node.op, tvm.ir.Op) and node.op.name in OPAQUE_CALLS:
            calls.append(node)

    walk(func.body, visit)
    if calls:
        raise UserInputError(f"opaque call {_describe_call(calls[0])}: extern and packed calls cannot be scheduled")
    if not blocks:
        raise UserInputError("no schedulable blocks: write the function with te.compute or as TVMScript "
                             "@T.prim_func(s_tir=True) with T.sblock, not as plain or already lowered loops")
    return _n_outputs(func, stored)


def _check_params(func: PrimFunc) -> None:
    for p in func.params:
        if type(p.ty).__name__ != "BufferType":
            raise UserInputError(f"scalar parameter {p.name} ({p.ty}): only buffer arguments can be tuned; "
                                 "bind it to a constant first (func.specialize)")
        symbolic = [str(d) for d in p.ty.shape if not isinstance(d, tvm.tirx.IntImm)]
        if symbolic:
            raise UserInputError(f"dynamic shape: argument {p.name} has symbolic dimension(s) "
                                 f"{', '.join(symbolic)}; give every dimension a fixed size")


def _n_outputs(func: PrimFunc, stored: list) -> int:
    written = [i for i, p in enumerate(func.params) if any(p.same_as(b) for b in stored)]
    if not written:
        raise UserInputError("the function writes none of its arguments: the outputs must be arguments")
    first = written[0]
    inputs_after = [func.params[i].name for i in range(first, len(func.params)) if i not in written]
    if inputs_after:
        raise UserInputError(f"output {func.params[first].name} comes before input {inputs_after[0]}: "
                             "order the arguments inputs first, then outputs")
    return len(written)


def _describe_call(call: Any) -> str:
    name = call.op.name
    if call.args and isinstance(call.args[0], tvm.ir.StringImm):
        name += f"({call.args[0].value!r})"
    return name


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


# --- tasks ------------------------------------------------------------------------------------------------
def program_task(program: Any, target: Target, name: str | None = None) -> Task:
    """A TE compute or a PrimFunc (bare or alone in an IRModule) as a task. The function is named ``main``
    (its key depends on structure only, not on names); its unscheduled build is the reference."""
    func, own_name = as_primfunc(program)
    n_outputs = check_primfunc(func)
    mod = IRModule({"main": func.with_attr("global_symbol", "main")})
    task = primfunc_task(name or own_name, mod, target, settings_for(target).version, n_outputs=n_outputs)
    task.info["source"] = "program"
    return task


def _target(target: str | Target, n_threads: int | None) -> Target:
    from autosched.api import build_target

    return build_target(target, n_threads)


def _model(program: IRModule, name: str | None):
    from autosched.graph.frontends import load_model

    return load_model(program, name=name)


@quiet_api
def tune(program: Any, target: str | Target = "llvm", db: str | Database = DEFAULT_DATABASE,
         config: TuneConfig | None = None, on_progress: Callable | None = None, name: str | None = None):
    """Tune any tensor program: a TE tensor or list of tensors (inputs, then outputs; outputs alone get their
    inputs in front), a TIR PrimFunc, an IRModule holding one PrimFunc, or a Relax IRModule.

    A TE compute or PrimFunc is one task (``config.n_trials`` measurements in ``db``; re-running resumes);
    returns a ``TuneResult`` whose ``task.key`` is what ``load_kernel``, ``best_module`` and ``autosched show``
    use. A Relax IRModule is tuned like a model (``tune_model``) and returns a ``ModelTuneResult``.
    Unsupported constructs raise ``UserInputError`` with one line naming them."""
    from autosched import api

    if is_relax_module(program):
        return api.tune_model(_model(program, name), target, db, config, on_progress)
    config = api.checked_config(config)
    task = program_task(program, api.tuning_target(target, config), name)
    return api.tune_planned_task(api.TaskPlan.of(task, config), db, on_progress)[0]


@quiet_api
def compile_program(program: Any, db: str | Database | None = None, target: str | Target = "llvm",
                    n_threads: int | None = None) -> Any:
    """Build a program with its best schedule in ``db`` (without ``db``: TVM's unscheduled build; a Relax
    module gets default schedules, as ``autosched.compile`` gives it).

    A TE compute or PrimFunc gives a TVM runtime Module (call ``["main"]`` with its arguments, outputs
    last); a Relax IRModule gives a ``CompiledModel`` (``autosched.compile``). The target and thread count
    must be the tuning run's (they are part of the task's key)."""
    target = _target(target, n_threads)
    if is_relax_module(program):
        from autosched.api import compile as compile_model

        return compile_model(_model(program, None), target, db)
    task = program_task(program, target)
    if db is None:
        return tvm.compile(task.mod, target=task.target).mod
    from autosched.api import load_kernel, opened

    with opened(db, create=False) as database:
        if database.task(task.key) is None:
            raise UserInputError(f"{task.name} (task {task.key}) is not in the database: tune it first, with this "
                                 f"target and thread count ({task.target.attrs.get('num-cores')})")
        return load_kernel(database, task.key)


# --- programs in Python files (the CLI's --func path.py:name) -----------------------------------------------
def load_program(spec: str) -> tuple[Any, str]:
    """(the program, its name) from ``path.py:name``: an attribute of the file that is a program, or a
    zero-argument callable returning one."""
    path_text, sep, attr = spec.rpartition(":")
    if not sep or not path_text or not attr:
        raise UserInputError(f"--func {spec!r}: write PATH.py:NAME, e.g. --func kernels.py:matmul")
    path = Path(path_text)
    if not path.is_file():
        raise UserInputError(f"--func {spec!r}: {path} is not a file")
    module = _exec_file(path)
    if not hasattr(module, attr):
        found = sorted(n for n, v in vars(module).items() if not n.startswith("_") and _looks_like_program(v))
        raise UserInputError(f"--func {spec!r}: {path} has no attribute {attr!r}"
                             + (f"; programs found there: {', '.join(found)}" if found else ""))
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, (PrimFunc, IRModule, te.Tensor)):
        try:
            obj = obj()
        except TypeError as err:
            raise UserInputError(f"--func {spec!r}: calling {attr}() failed ({_first_line(err)}): give a program "
                                 "or a function without arguments that returns one") from err
        except Exception as err:
            raise UserInputError(f"--func {spec!r}: {attr}() raised {type(err).__name__}: {_first_line(err)}"
                                 ) from err
    return obj, attr


def _exec_file(path: Path) -> Any:
    name = f"_autosched_program_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserInputError(f"--func: cannot import {path}: give a Python file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # TVMScript looks up the defining module of @T.prim_func
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise UserInputError(f"--func: running {path} raised {type(err).__name__}: {_first_line(err)}") from err
    return module


def _looks_like_program(value: Any) -> bool:
    return isinstance(value, (PrimFunc, IRModule, te.Tensor)) or (
        isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, te.Tensor) for v in value))


__all__ = ["as_primfunc", "check_primfunc", "compile_program", "is_relax_module", "load_program", "program_task",
           "tune", "walk"]
