"""The bridge to a task's Optuna study: its sampler, which tuner owns each trial, and how each outcome is told.

One study per (task, target), stored beside the tuning records, named ``autosched-<task key> <what the task is>``
(``study_name``) and found again by its key alone (``task_studies``, the one lookup: older databases' studies are
named ``autosched-<task key>``). How each outcome reaches the sampler is listed in
``search/optuna_strategy.py``'s docstring (and pinned by tests/search/test_optuna_strategy.py).
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import psutil
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import Trial, TrialState

from autosched.db.leases import host_id, same_host
from autosched.errors import UnknownNameError, UserInputError
from autosched.masking import mask_secrets
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


STUDY_PREFIX = "autosched-"
_STUDY_NAME = re.compile(rf"{STUDY_PREFIX}(?P<key>[^\s@]+)(?:@(?P<designs>\d+)designs)?(?:\s.*)?", re.S)
ABOUT_ATTRS = ("task", "pattern", "shape", "target")  # study user attributes (Task.about), with "task_key"


def study_name(task_key: str, about: dict[str, str] | None = None, n_designs: int | None = None) -> str:
    """``autosched-<key>[@<n>designs] <task> · <pattern> · <shape> · <target>``: the key first (what finds the
    study again), then what tells the task apart in optuna-dashboard's study list, which shows names only."""
    head = f"{STUDY_PREFIX}{task_key}" + (f"@{n_designs}designs" if n_designs is not None else "")
    words = " · ".join(about[a] for a in ABOUT_ATTRS if (about or {}).get(a))
    return f"{head} {words}"[:500] if words else head  # Optuna's RDB storage holds names of up to 512 characters


def parse_study_name(name: str) -> tuple[str, int | None] | None:
    """(task key, number of designs or None) of an autosched study's name, old or new; None for another study."""
    m = _STUDY_NAME.fullmatch(name)
    return (m["key"], int(m["designs"]) if m["designs"] else None) if m else None


def task_studies(storage: Any) -> dict[str, list[Any]]:
    """Task key -> its studies in ``storage`` (``FrozenStudy``), oldest first: the one lookup of a task's studies,
    by the key that begins their names, whatever follows it (nothing in databases tuned before studies were
    labelled; a description of the task since; a description that another model's task of the same key gave)."""
    storage = optuna.storages.get_storage(storage)
    out: dict[str, list] = {}
    for study in sorted(storage.get_all_studies(), key=lambda s: s._study_id):
        parsed = parse_study_name(study.study_name)
        if parsed is not None:
            out.setdefault(parsed[0], []).append(study)
    return out


def task_study_name(storage: Any, task_key: str, n_designs: int | None = None) -> str | None:
    """The name of the task's (first) study for ``n_designs`` designs (None: the one begun first), if it has one."""
    return next((s.study_name for s in task_studies(storage).get(task_key, [])
                 if parse_study_name(s.study_name)[1] == n_designs), None)


def load_task_study(storage: Any, task_key: str, n_designs: int | None = None) -> optuna.Study:
    """The task's study (the one begun for ``n_designs`` designs, where given); KeyError where there is none."""
    storage = optuna.storages.get_storage(storage)
    name = task_study_name(storage, task_key, n_designs)
    if name is None:
        raise KeyError(f"no study of task {task_key} in this storage")
    return optuna.load_study(study_name=name, storage=storage)


@functools.cache
def _owner(pid: int) -> list:
    return [host_id(), pid, psutil.Process(pid).create_time()]


def _owner_is_gone(owner: Any, started: Any) -> bool:
    """Whether the tuner that asked a RUNNING trial is dead (it will never tell it)."""
    if not isinstance(owner, list) or len(owner) != 3:
        return started is None or (datetime.datetime.now() - started).total_seconds() > ORPHAN_AFTER_S
    host, pid, created = owner
    if not isinstance(host, str) or not same_host(host):
        return False  # another machine's or container's tuner: no way to tell from here
    try:
        return abs(psutil.Process(pid).create_time() - created) > 1e-3  # pid reused by another process
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, TypeError):
        return True


def mark_outcome(trial: Trial, status: Status, error: str | None = None) -> None:
    """Status as a user attribute and as an Optuna constraint (<= 0 feasible): failures violate it."""
    trial.set_user_attr(STATUS_ATTR, status.value)
    trial.set_constraint(CONSTRAINT, 0.0 if status is Status.OK else 1.0)
    if error:
        trial.set_user_attr("error", mask_secrets(error)[:500])


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
    """A task's study (``study_name``) over a space: owned trials in, outcomes out. ``about`` (``Task.about``):
    what the task is, in the name of a new study and as user attributes of the study (old ones get them too)."""

    def __init__(self, space: SearchSpace, task_key: str, storage: Any,
                 sampler: str | optuna.samplers.BaseSampler = "tpe", seed: int = 0,
                 about: dict[str, str] | None = None):
        self.space, self.sampler_spec = space, sampler
        self.task_key, self.about = task_key, dict(about or {})
        self.study = self._open_study(storage, create_sampler(sampler, seed))
        self._label()
        self._fail_stale_trials()

    def _create(self, storage: Any, sampler: optuna.samplers.BaseSampler, n_designs: int | None) -> optuna.Study:
        """The task's stored study for ``n_designs`` (whatever it was named), or a new one."""
        name = task_study_name(storage, self.task_key, n_designs) or study_name(self.task_key, self.about, n_designs)
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                                   load_if_exists=True)

    def _open_study(self, storage: Any, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        """The task's study; where a stored one chose among fewer designs than the space has now (a design
        added since, appended after the others), a study of its own (``autosched-<key>@<n>designs ...``): Optuna
        cannot widen a categorical knob of a study it has sampled (the measured records still count, through
        ``seen`` and the database)."""
        storage = optuna.storages.get_storage(storage)
        study = self._create(storage, sampler, None)
        design = self.space.knobs().get("design")
        if not isinstance(design, CategoricalDistribution):
            return study
        for t in study.get_trials(deepcopy=False):
            stored = t.distributions.get("design")
            if isinstance(stored, CategoricalDistribution):
                if tuple(stored.choices) == tuple(design.choices):
                    return study
                return self._create(storage, sampler, len(design.choices))
        return study

    def _label(self) -> None:
        """The task's key and description as the study's user attributes, where it lacks them (a study named
        before studies were labelled; another model's task of the same key keeps the first description)."""
        have = self.study.user_attrs
        for attr, value in {"task_key": self.task_key, **self.about}.items():
            if value and attr not in have:
                try:
                    self.study.set_user_attr(attr, value)
                except optuna.exceptions.StorageInternalError:  # another tuner set it at the same moment
                    pass

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
