"""The bridge to a task's Optuna study: its sampler, which tuner owns each trial, and how each outcome is told.

One study per (task, target), stored beside the tuning records. How each outcome reaches the sampler is listed in
``search/optuna_strategy.py``'s docstring (and pinned by tests/search/test_optuna_strategy.py).
"""

from __future__ import annotations

import datetime
import functools
import os
import socket
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import psutil
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import Trial, TrialState

from autosched.errors import UnknownNameError, UserInputError
from autosched.records import MeasureResult, Status
from autosched.spaces.base import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Constraints have been set, but CmaEsSampler")  # it ignores pruned ones

STATUS_ATTR = "status"
PREDICTED_ATTR = "predicted_score"  # set on trials the cost model picked
TIMING_ATTR = "timing_s"  # set on measured trials: {"search": s, "build": s, "measure": s, "build_worker": s}


CONSTRAINT = "measured_ok"
OWNER_ATTR = "owner"  # set on asked trials: [host, pid, process start time] of the tuner measuring it
ORPHAN_AFTER_S = 3600.0  # a RUNNING trial without an owner (older autosched) is stale after this long


@functools.cache
def _owner(pid: int) -> list:
    return [socket.gethostname(), pid, psutil.Process(pid).create_time()]


def _owner_is_gone(owner: Any, started: Any) -> bool:
    """Whether the tuner that asked a RUNNING trial is dead (it will never tell it)."""
    if not isinstance(owner, list) or len(owner) != 3:
        return started is None or (datetime.datetime.now() - started).total_seconds() > ORPHAN_AFTER_S
    host, pid, created = owner
    if host != socket.gethostname():
        return False  # another machine's tuner: no way to tell from here
    try:
        return abs(psutil.Process(pid).create_time() - created) > 1e-3  # pid reused by another process
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, TypeError):
        return True


def mark_outcome(trial: Trial, status: Status, error: str | None = None) -> None:
    """Status as a user attribute and as an Optuna constraint (<= 0 feasible): failures violate it."""
    trial.set_user_attr(STATUS_ATTR, status.value)
    trial.set_constraint(CONSTRAINT, 0.0 if status is Status.OK else 1.0)
    if error:
        trial.set_user_attr("error", error[:500])


def params_key(params: dict[str, Any]) -> tuple:
    """A setting as a hashable key (integral floats as ints, as a stored trial may hold them)."""
    return tuple(sorted((k, int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in params.items()))


def _tpe(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                      n_startup_trials=10)


def _gp(seed: int) -> optuna.samplers.BaseSampler:
    try:
        import torch  # noqa: F401
    except ImportError as err:
        raise UserInputError("the gp sampler needs PyTorch: pip install 'autosched[torch]'") from err
    return optuna.samplers.GPSampler(seed=seed)


SAMPLERS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    "tpe": _tpe,
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    "cmaes": lambda seed: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
    "gp": _gp,
    "nsga2": lambda seed: optuna.samplers.NSGAIISampler(seed=seed),
}


def create_sampler(name: str | optuna.samplers.BaseSampler, seed: int) -> optuna.samplers.BaseSampler:
    if isinstance(name, optuna.samplers.BaseSampler):
        return name
    if name not in SAMPLERS:
        raise UnknownNameError("sampler", name, list(SAMPLERS))
    return SAMPLERS[name](seed)


class StudyBridge:
    """A task's study (``autosched-<task key>``) over a space: owned trials in, outcomes out."""

    def __init__(self, space: SearchSpace, task_key: str, storage: Any,
                 sampler: str | optuna.samplers.BaseSampler = "tpe", seed: int = 0):
        self.space, self.sampler_spec = space, sampler
        self.study = self._open_study(f"autosched-{task_key}", storage, create_sampler(sampler, seed))
        self._fail_stale_trials()

    def _open_study(self, name: str, storage: Any, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        """The task's study; where a stored one chose among fewer designs than the space has now (a design
        added since, appended after the others), a study of its own (``<name>@<n>designs``): Optuna cannot
        widen a categorical knob of a study it has sampled (the measured records still count, through ``seen``
        and the database)."""
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                                    load_if_exists=True)
        design = self.space.knobs().get("design")
        if not isinstance(design, CategoricalDistribution):
            return study
        for t in study.get_trials(deepcopy=False):
            stored = t.distributions.get("design")
            if isinstance(stored, CategoricalDistribution):
                if tuple(stored.choices) == tuple(design.choices):
                    return study
                return optuna.create_study(study_name=f"{name}@{len(design.choices)}designs", storage=storage,
                                           sampler=sampler, direction="minimize", load_if_exists=True)
        return study

    def _fail_stale_trials(self) -> None:
        """Trials left RUNNING by an interrupted run are our own failure, not measurements. Trials of tuners
        still at work on the same study (another process, another machine) are theirs to finish."""
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if _owner_is_gone(t.user_attrs.get(OWNER_ATTR), t.datetime_start):
                try:
                    self.study.tell(t.number, state=TrialState.FAIL)
                except ValueError:  # finished meanwhile by its owner
                    pass

    def scratch(self, seed: int) -> optuna.Study:
        """A throw-away in-memory copy of the study's finished trials, with a sampler of its own seeded ``seed``
        (the same sampler where the study was given an instance)."""
        sampler = (self.sampler_spec if isinstance(self.sampler_spec, optuna.samplers.BaseSampler)
                   else create_sampler(self.sampler_spec, seed))
        scratch = optuna.create_study(sampler=sampler, direction="minimize")
        scratch.add_trials(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
        return scratch

    def suggest(self, trial: Trial) -> dict[str, Any]:
        """The setting ``trial`` samples: the design first (where the space has designs), then its knobs."""
        knobs = self.space.knobs()
        params: dict[str, Any] = {}
        design_dist = knobs.get("design")
        design = None
        if isinstance(design_dist, CategoricalDistribution):
            design = trial.suggest_categorical("design", list(design_dist.choices))
            params["design"] = design
            knobs = self.space.knobs(design)
        for name, dist in knobs.items():
            if isinstance(dist, IntDistribution):
                params[name] = trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
            elif isinstance(dist, CategoricalDistribution):
                params[name] = trial.suggest_categorical(name, list(dist.choices))
            else:
                raise TypeError(f"knob {name}: unsupported distribution {type(dist).__name__}")
        return params

    # --- asking ------------------------------------------------------------------------------------------------
    def n_waiting(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def enqueue(self, params: dict[str, Any]) -> None:
        """Queue ``params`` to be asked next, owned by this tuner."""
        self.study.enqueue_trial(params, user_attrs={OWNER_ATTR: _owner(os.getpid())})

    def propose(self, params: dict[str, Any]) -> bool:
        """Queue ``params`` unless a trial of the study (queued or told) already has them; whether it was queued."""
        key = params_key(params)
        if any(params_key(t.system_attrs.get("fixed_params", t.params)) == key
               for t in self.study.get_trials(deepcopy=False)):
            return False
        self.enqueue(params)
        return True

    def ask_owned(self) -> Trial:
        """A trial that names its tuner from the moment it exists (a queued trial carries the owner into
        ``ask``), so a kill between ask and tell never leaves a RUNNING trial nobody can tell is orphaned."""
        owner = _owner(os.getpid())
        if not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            self.study.enqueue_trial({}, user_attrs={OWNER_ATTR: owner})
        trial = self.study.ask()
        trial.set_user_attr(OWNER_ATTR, owner)  # the queued trial may be another tuner's
        return trial

    # --- telling -----------------------------------------------------------------------------------------------
    def mark_predicted(self, trial: Trial, score: float) -> None:
        trial.set_user_attr(PREDICTED_ATTR, score)

    def tell_measured(self, trial: Trial, res: MeasureResult, timing: dict[str, float]) -> None:
        trial.set_user_attr(TIMING_ATTR, timing)
        self.tell_result(trial, res)

    def tell_result(self, trial: Trial, res: MeasureResult) -> None:
        mark_outcome(trial, res.status, res.error)
        if res.ok:
            self.study.tell(trial, res.latency_s)
        else:
            self.study.tell(trial, state=TrialState.PRUNED)

    def reject(self, trial: Trial, reason: str) -> None:
        """Rejected before build: pruned with the constraint violated, never a measurement."""
        mark_outcome(trial, Status.INVALID, reason)
        self.study.tell(trial, state=TrialState.PRUNED)

    def tell_duplicate(self, trial: Trial, prior: MeasureResult | None) -> None:
        """A schedule measured before: told its result; FAIL (ignored by the samplers) while it is being measured."""
        trial.set_user_attr("duplicate", True)
        if prior is None:  # the same schedule is being measured right now
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.tell_result(trial, prior)

    def fail(self, trial: Trial) -> None:
        """Our own failure (an abandoned trial): FAIL, which the samplers ignore."""
        self.study.tell(trial, state=TrialState.FAIL)
