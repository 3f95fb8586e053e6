"""The parts of a tuning run a user may plug in as objects, as Optuna takes a sampler and MetaSchedule a runner.

``tune_model(..., sampler=..., runner=..., cost_model=..., callbacks=[...])`` (and ``tune_operator``) take each part
as a name (a string: what ``TuneConfig`` and the CLI spell) or as an object:

- ``sampler``: any ``optuna.samplers.BaseSampler`` (one instance serves every task's study, as one sampler serves
  many ``optuna.create_study`` calls), or a callable ``(task) -> BaseSampler`` for a fresh one per task;
- ``runner``: an ``autosched.measure.Runner`` (e.g. a ``LocalRunner`` with other repeats, or a subclass that times
  candidates elsewhere); ``builder``: an ``autosched.measure.Builder``. Objects the user passes are the user's:
  the run uses them and does not close them;
- ``cost_model``: an ``autosched.cost.CostModel`` that screens the sampler's proposals (fitted or not; it is refit
  on each task's measurements as XGBoost's is only when it is an ``XGBCostModel``);
- ``callbacks``: callables, each given every progress event (``TuneProgress`` of a task, ``ModelProgress`` of a
  model), after ``on_progress``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autosched.config import TuneConfig
from autosched.errors import UserInputError


@dataclass(frozen=True)
class Parts:
    """The objects a run uses instead of building its own from the config's names (None: built from the config)."""

    sampler: Any = None  # an optuna BaseSampler, or a callable (task) -> BaseSampler
    runner: Any = None  # autosched.measure.Runner
    builder: Any = None  # autosched.measure.Builder
    cost_model: Any = None  # autosched.cost.CostModel
    callbacks: tuple[Callable[[Any], None], ...] = ()

    def sampler_for(self, task: Any) -> Any:
        """The sampler object for ``task``'s study, or None (the config's named sampler)."""
        import optuna

        if self.sampler is None or isinstance(self.sampler, optuna.samplers.BaseSampler):
            return self.sampler
        made = self.sampler(task)
        if not isinstance(made, optuna.samplers.BaseSampler):
            raise UserInputError(f"sampler: the callable returned {type(made).__name__}, not an Optuna sampler: "
                                 "return e.g. optuna.samplers.TPESampler(seed=0)")
        return made

    def progress(self, on_progress: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
        """``on_progress`` followed by every callback, as one callable (None where there is neither)."""
        hooks = [h for h in (on_progress, *self.callbacks) if h is not None]
        if not hooks:
            return None
        if len(hooks) == 1:
            return hooks[0]

        def every(event: Any) -> None:
            for hook in hooks:
                hook(event)

        return every


NO_PARTS = Parts()


def parts_of(config: TuneConfig, sampler: Any = None, runner: Any = None, builder: Any = None, cost_model: Any = None,
             callbacks: Sequence[Callable[[Any], None]] | None = None) -> tuple[TuneConfig, Parts]:
    """(the config with the names among the arguments set in it, the objects among them as ``Parts``), each
    object's kind checked: a wrong one is a one-line ``UserInputError`` naming what was expected."""
    import optuna

    from autosched.cost.base import CostModel
    from autosched.measure.base import Builder, Runner

    names: dict[str, str] = {}
    if isinstance(sampler, str):
        names["sampler"], sampler = sampler, None
    elif sampler is not None and not (isinstance(sampler, optuna.samplers.BaseSampler) or callable(sampler)):
        raise UserInputError(f"sampler: {type(sampler).__name__} is not an Optuna sampler: pass a name (tpe, random, "
                             "cmaes, gp, nsga2), an optuna.samplers.BaseSampler, or a callable (task) -> sampler")
    if isinstance(cost_model, str):
        names["cost_model"], cost_model = cost_model, None
    elif cost_model is not None and not isinstance(cost_model, CostModel):
        raise UserInputError(f"cost_model: {type(cost_model).__name__} is not an autosched.cost.CostModel: pass a "
                             "name (xgb, random, none) or a CostModel subclass's instance")
    for name, part, kind in (("runner", runner, Runner), ("builder", builder, Builder)):
        if part is not None and not isinstance(part, kind):
            raise UserInputError(f"{name}: {type(part).__name__} is not an autosched.measure.{kind.__name__}: "
                                 f"subclass it (or pass none for the default {name})")
    hooks = tuple(callbacks or ())
    if any(not callable(h) for h in hooks):
        raise UserInputError("callbacks: every callback must be callable (it is given each progress event)")
    return (config.replace(**names) if names else config), Parts(sampler, runner, builder, cost_model, hooks)
