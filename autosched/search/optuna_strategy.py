"""Optuna ask/tell over a SearchSpace. One study per (task, target), stored beside the tuning records.

How each outcome reaches the sampler (pinned by tests/search/test_optuna_strategy.py):
- measured OK            -> COMPLETE with value = median latency in seconds (minimised)
- measured, but failed   -> PRUNED, user_attr status, constraint violated (TPE/NSGA-II/GP learn to avoid it)
- rejected before build  -> PRUNED, status INVALID, constraint violated; never a measurement
- same schedule again    -> told the value already measured for it (no new measurement, no new record);
                            FAIL (ignored by the samplers) if that schedule is still being measured
- screened out by the cost model -> never in this study: proposals come from a scratch copy (see _screened)
- picked by the cost model -> as above, plus user_attr predicted_score (counted per design for coverage)
- every measured trial      -> user_attr timing_s: its share of the batch's wall time in search (ask, cost-model
                              refit) and build, and its own measurement time (read by ``autosched report``)
- our own crash / Ctrl-C -> FAIL
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import socket
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import optuna
import psutil
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import Trial, TrialState

from autosched._tvm import as_python, save_json
from autosched.errors import InvalidConfig, UnknownNameError, UserInputError
from autosched.records import Candidate, MeasureResult, Status, schedule_key
from autosched.search.base import SearchStrategy
from autosched.search.screen import ModelScreen, Proposal
from autosched.spaces.base import SearchSpace

log = logging.getLogger("autosched.search")
optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Constraints have been set, but CmaEsSampler")  # it ignores pruned ones

STATUS_ATTR = "status"
PREDICTED_ATTR = "predicted_score"  # set on trials the cost model picked
TIMING_ATTR = "timing_s"  # set on measured trials: {"search": s, "build": s, "measure": s, "build_worker": s}


CONSTRAINT = "measured_ok"
OWNER_ATTR = "owner"  # set on asked trials: [host, pid, process start time] of the tuner measuring it
MAX_PREBUILT = 256  # repaired settings' schedules kept until the sampler asks them (each built once)
MAX_REMEMBERED = 100_000  # pooled settings whose schedule key is kept (a few MB), so none is built twice
APPLY_THREADS = min(4, os.cpu_count() or 1)  # threads building a pool's schedules
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


def _params_key(params: dict[str, Any]) -> tuple:
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


class OptunaStrategy(SearchStrategy):
    def __init__(self, space: SearchSpace, task_key: str, storage: Any, sampler: str | optuna.samplers.BaseSampler
                 = "tpe", seed: int = 0, seen: dict[str, MeasureResult] | None = None, max_tries_per_ask: int = 16,
                 screen: ModelScreen | None = None):
        self.space, self.task_key, self.seed, self.screen = space, task_key, seed, screen
        self._sampler_spec = sampler
        self.study = self._open_study(f"autosched-{task_key}", storage, create_sampler(sampler, seed))
        self._fail_stale_trials()
        self._seen: dict[str, MeasureResult] = dict(seen or {})  # dedup key -> result of that schedule
        self._pending: dict[str, Trial] = {}
        self._prebuilt: dict[tuple, Any] = {}  # a repaired setting (_params_key) -> the schedule repair built
        self._pool_keys: dict[tuple, str | None] = {}  # a pooled setting -> its schedule key (None: illegal)
        self._rejected: list[Candidate] = []
        self._scores: dict[str, float] = {}  # predicted scores of enqueued proposals
        self.max_tries_per_ask = max_tries_per_ask
        self.exhausted = False
        self._search_s = 0.0  # search time not yet charged to a batch (the last refit, the current ask)
        self._asked_at = 0.0  # time.perf_counter() when the last ask returned

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

    def _suggest(self, trial: Trial) -> dict[str, Any]:
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

    @functools.cached_property
    def space_signature(self) -> str:
        """Equal for tasks whose spaces have the same knobs by name and kind, whatever their ranges: one
        operator at other shapes (a bucket's matmul, a wider layer), or with other epilogues. A schedule of
        one maps to a valid point of the other through ``fitted``."""
        return repr(sorted((name, type(dist).__name__) for name, dist in self.space.knobs().items()))

    def fitted(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """A sibling space's point in this space: integer knobs (tile sizes as divisor indices, unroll depths:
        ordinal) clamped into this space's range, so the same index picks the same or the nearest tile; None
        where a categorical value is not one of this space's choices."""
        knobs = self.space.knobs()
        out: dict[str, Any] = {}
        for name, value in params.items():
            dist = knobs.get(name)
            if isinstance(dist, IntDistribution):
                out[name] = min(max(int(value), dist.low), dist.high)
            elif isinstance(dist, CategoricalDistribution) and value in dist.choices:
                out[name] = value
            else:
                return None
        return out

    def propose(self, params: dict[str, Any]) -> bool:
        """Measure this setting next (e.g. a similar task's best), unless it is already queued or measured;
        returns whether it was queued."""
        key = _params_key(params)
        if any(_params_key(t.system_attrs.get("fixed_params", t.params)) == key
               for t in self.study.get_trials(deepcopy=False)):
            return False
        self.study.enqueue_trial(params, user_attrs={OWNER_ATTR: _owner(os.getpid())})
        return True

    def ask(self, n: int) -> list[Candidate]:
        start = time.perf_counter()
        queued = len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        if self.screen is not None and self.screen.ready and queued < n:
            # proposed settings are measured first (in the order queued); the model screens only the rest of
            # the batch, so none of its picks waits for a later batch, ranked by a model refitted since
            for proposal in self._screened(n - queued):
                self.study.enqueue_trial(proposal.params, user_attrs={OWNER_ATTR: _owner(os.getpid())})
                self._scores[proposal.key] = proposal.score
        out = self._ask_direct(n)
        self._asked_at = time.perf_counter()
        self._search_s += self._asked_at - start
        return out

    def _screened(self, n: int) -> list[Proposal]:
        """A pool from a throw-away copy of the study (so unmeasured proposals never reach the real one)."""
        sampler = (self._sampler_spec if isinstance(self._sampler_spec, optuna.samplers.BaseSampler)
                   else create_sampler(self._sampler_spec, self.seed + len(self._seen) + 1))
        scratch = optuna.create_study(sampler=sampler, direction="minimize")
        scratch.add_trials(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
        pool: dict[str, tuple[dict[str, Any], Any]] = {}
        want, tries = n * self.screen.pool_factor, 0
        while len(pool) < want and tries < want * 4:
            trials = [scratch.ask() for _ in range(min(want - len(pool), want * 4 - tries))]
            tries += len(trials)
            legal = self._add_to_pool(pool, [self._suggest(trial) for trial in trials])
            for trial, ok in zip(trials, legal, strict=True):
                if not ok:
                    scratch.tell(trial, state=TrialState.PRUNED)
            # a pooled trial is left RUNNING in the scratch study: the constant liar spreads the pool
        self._add_to_pool(pool, self._neighbours(2 * want))
        measured = self._model_picks_per_design()
        self._add_to_pool(pool, self._design_samples(measured, n))
        if not pool:
            return []
        proposals = self._evolve(self._proposals(pool, list(pool)), n)
        return self.screen.select(proposals, min(n, len(proposals)), measured)

    def _proposals(self, pool: dict[str, tuple[dict[str, Any], Any]], keys: list[str]) -> list[Proposal]:
        X = self.screen.features([pool[k][1] for k in keys], keys)  # a schedule is None where featurised before
        return [Proposal(pool[k][0], k, x, group=pool[k][0].get("design")) for k, x in zip(keys, X, strict=True)]

    def _evolve(self, proposals: list[Proposal], n: int) -> list[Proposal]:
        """Model-guided local search (MetaSchedule's evolutionary search, small): for ``screen.generations``
        rounds, the ``n`` best-predicted proposals each get ``2 * pool_factor`` mutants added to the pool. The
        sampler and one-step neighbours of measured settings rarely reach a good schedule that is several
        small steps away; the model, cheap next to a measurement, walks there."""
        rng = np.random.default_rng(self.seed + 104729 * (len(self._seen) + 1))
        known = {p.key for p in proposals}
        for _ in range(self.screen.generations):
            self.screen.score(proposals)
            pool: dict[str, tuple[dict[str, Any], Any]] = {}
            parents = sorted(proposals, key=lambda p: -p.score)[:n]
            self._add_to_pool(pool, [self._mutate(parent.params, rng) for parent in parents
                                     for _ in range(2 * self.screen.pool_factor)])
            new = [k for k in pool if k not in known]
            if not new:
                break
            proposals += self._proposals(pool, new)
            known.update(new)
        return proposals

    def _model_picks_per_design(self) -> dict[Any, int]:
        """Design -> screened proposals measured so far (0 for every design without one; {} for one design)."""
        design = self.space.knobs().get("design")
        if not isinstance(design, CategoricalDistribution):
            return {}
        counts = dict.fromkeys(design.choices, 0)
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if PREDICTED_ATTR in t.user_attrs and t.params.get("design") in counts:
                counts[t.params.get("design")] += 1
        return counts

    def _design_samples(self, measured: dict[Any, int], batch: int) -> list[dict[str, Any]]:
        """For every design with fewer measured model picks than ``screen.cover_floor`` (once ``batch`` is
        measured): random settings, and settings a few knobs away from its best measured ones (the sampler stops
        proposing designs it has seen do badly, and the neighbours of the task's best are all of the leading
        design, so the pool may lack them)."""
        rng = np.random.default_rng(self.seed + 7919 * (len(self._seen) + 1))
        out, floor = [], self.screen.cover_floor(measured, batch)
        fastest = self._fastest()  # read once, whatever the number of designs below the floor
        for design, count in measured.items():
            if count >= floor:
                continue
            for _ in range(2 * self.screen.pool_factor):
                out.append({"design": design, **self._random_knobs(design, rng)})
            own = [params for params in fastest if params.get("design") == design][:4]
            out += self._mutants(own, 2 * self.screen.pool_factor, rng)
        return out

    def _random_knobs(self, design: Any, rng: np.random.Generator, names: list[str] | None = None) -> dict[str, Any]:
        knobs = self.space.knobs(design)
        out: dict[str, Any] = {}
        for name in names if names is not None else knobs:
            dist = knobs[name]
            if isinstance(dist, IntDistribution):
                out[name] = int(rng.integers(dist.low, dist.high + 1))
            elif isinstance(dist, CategoricalDistribution):
                out[name] = dist.choices[int(rng.integers(len(dist.choices)))]
        return out

    def _add_to_pool(self, pool: dict[str, tuple[dict[str, Any], Any]], batch: list[dict[str, Any]]) -> list[bool]:
        """Add each legal, not yet measured setting of ``batch`` (or, where the space repairs, a legal one near
        it) to the pool; False for each illegal one. Settings met before are not built again: their schedule
        key (or illegality) is remembered, and their features with the screen (the pool then holds no
        schedule for them). The others' schedules are built on a few threads (TVM's trace replay and
        postprocessors run outside the GIL): a proposal's cost is mostly this."""
        if len(self._pool_keys) >= MAX_REMEMBERED:
            self._pool_keys.clear()
        by_key = {_params_key(p): p for p in batch}
        todo = [k for k in by_key if k not in self._pool_keys]
        with ThreadPoolExecutor(APPLY_THREADS) as threads:
            built = list(threads.map(lambda k: self._try_apply(by_key[k]), todo))
        fresh: dict[tuple, tuple[dict[str, Any], Any, str]] = {}
        for k, sch in zip(todo, built, strict=True):
            params = by_key[k]
            if sch is None:
                repaired = self._repaired(params, seed=self.seed + len(pool))
                if repaired is None:
                    self._pool_keys[k] = None
                    continue
                params, sch = repaired  # not remembered: the repair may differ next time
            key = schedule_key(self.space.effective_decisions(sch))
            if params is by_key[k]:
                self._pool_keys[k] = key
            fresh[k] = (params, sch, key)
        legal = []
        for params in batch:
            k = _params_key(params)
            params, sch, key = fresh.get(k, (params, None, self._pool_keys.get(k)))
            if key is None:
                legal.append(False)
                continue
            legal.append(True)
            if key in self._seen or key in self._pending or key in pool:
                continue
            if sch is None and not self.screen.has_features(key):  # remembered, never featurised: build again
                sch = self._try_apply(params)
            if sch is not None or self.screen.has_features(key):
                pool[key] = (params, sch)
        return legal

    def _try_apply(self, params: dict[str, Any]) -> Any:
        try:
            return self.space.apply(params)
        except InvalidConfig:
            return None

    def _neighbours(self, n: int) -> list[dict[str, Any]]:
        """``n`` settings one to three knobs away from the best measured ones (the sampler alone rarely proposes
        the small steps that take a good schedule to a better one)."""
        rng = np.random.default_rng(self.seed + len(self._seen))
        return self._mutants(self._fastest()[: max(1, n // 8)], n, rng)

    def _fastest(self) -> list[dict[str, Any]]:
        """Settings of the measured trials, fastest first."""
        done = sorted(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.value)
        return [t.params for t in done]

    def _mutants(self, parents: list[dict[str, Any]], n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        """``n`` mutations of ``parents`` in turn (none without parents)."""
        return [self._mutate(parents[i % len(parents)], rng) for i in range(n)] if parents else []

    def _mutate(self, params: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """``params`` with one to three knobs of its design set at random (layer_norm: the fast kernels are three
        compute locations away from where a search of one- and two-knob steps settles)."""
        out, design = dict(params), params.get("design")  # a space may have no designs (SearchSpace.knobs)
        knobs = [name for name in self.space.knobs(design) if name != "design"]
        names = rng.choice(knobs, size=min(len(knobs), int(rng.integers(1, 4))), replace=False)
        out.update(self._random_knobs(design, rng, [str(name) for name in names]))
        return out

    def _ask_owned(self) -> Trial:
        """A trial that names its tuner from the moment it exists (a queued trial carries the owner into
        ``ask``), so a kill between ask and tell never leaves a RUNNING trial nobody can tell is orphaned."""
        owner = _owner(os.getpid())
        if not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            self.study.enqueue_trial({}, user_attrs={OWNER_ATTR: owner})
        trial = self.study.ask()
        trial.set_user_attr(OWNER_ATTR, owner)  # the queued trial may be another tuner's
        return trial

    def _ask_direct(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        tries = duplicates = 0
        while len(out) < n and tries < self.max_tries_per_ask * n:
            if len(self._seen) + len(self._pending) >= self.space.size():
                break  # every distinct setting has been proposed
            tries += 1
            trial = self._ask_owned()
            params = self._suggest(trial)
            try:
                sch = self._prebuilt.pop(_params_key(params), None) or self.space.apply(params)
            except InvalidConfig as err:
                self._reject(trial, params, str(err))
                repaired = self._repaired(params, seed=self.seed + trial.number)
                if repaired is not None:  # asked next (a GPU space: most raw settings are illegal), built once
                    if len(self._prebuilt) >= MAX_PREBUILT:
                        self._prebuilt.clear()
                    self._prebuilt[_params_key(repaired[0])] = repaired[1]
                    self.propose(repaired[0])
                continue
            cand = Candidate(self.task_key, params, decisions=self.space.effective_decisions(sch),
                             trial_number=trial.number)
            key = cand.dedup_key()
            if key in self._seen or key in self._pending or any(c.dedup_key() == key for c in out):
                self._tell_duplicate(trial, key)
                duplicates += 1
                if duplicates >= self.max_tries_per_ask:  # the sampler keeps to what is measured: explore
                    self.propose(self._random_params(len(self._seen) + tries))
                continue
            cand.trace_json = as_python(sch.trace.as_json(remove_postproc=False))
            cand.predicted_score = self._scores.pop(key, None)
            if cand.predicted_score is not None:
                trial.set_user_attr(PREDICTED_ATTR, cand.predicted_score)
            if self.screen is not None:
                self.screen.ensure_features(sch, key)
            cand.mod_json = save_json(sch.mod)
            self._pending[key] = trial
            out.append(cand)
        self.exhausted = len(out) < n
        return out

    def _repaired(self, params: dict[str, Any], seed: int) -> tuple[dict[str, Any], Any] | None:
        """A legal setting near the rejected ``params`` and its schedule, where the space repairs (GPU spaces)."""
        return self.space.repair(params, seed=seed)

    def _random_params(self, seed: int) -> dict[str, Any]:
        """A point drawn uniformly from the space (the design first, then its knobs), reproducible by ``seed``."""
        rng = np.random.default_rng([self.seed, seed])
        knobs, params = self.space.knobs(), {}
        if isinstance(knobs.get("design"), CategoricalDistribution):
            params["design"] = knobs["design"].choices[rng.integers(len(knobs["design"].choices))]
            knobs = self.space.knobs(params["design"])
        for name, dist in knobs.items():
            if name == "design":
                continue
            if isinstance(dist, IntDistribution):
                params[name] = int(dist.low + dist.step * rng.integers((dist.high - dist.low) // dist.step + 1))
            elif isinstance(dist, CategoricalDistribution):
                params[name] = dist.choices[rng.integers(len(dist.choices))]
        return params

    def _reject(self, trial: Trial, params: dict[str, Any], reason: str) -> None:
        mark_outcome(trial, Status.INVALID, reason)
        self.study.tell(trial, state=TrialState.PRUNED)
        self._rejected.append(Candidate(self.task_key, params, trial_number=trial.number, invalid_reason=reason))

    def _tell_duplicate(self, trial: Trial, key: str) -> None:
        prior = self._seen.get(key)
        trial.set_user_attr("duplicate", True)
        if prior is None:  # the same schedule is being measured right now
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self._tell_result(trial, prior)

    def tell(self, candidates: list[Candidate], results: list[MeasureResult]) -> None:
        timings = self._timings(results)
        for cand, res, timing in zip(candidates, results, timings, strict=True):
            key = cand.dedup_key()
            trial = self._pending.pop(key)
            self._seen[key] = res
            trial.set_user_attr(TIMING_ATTR, timing)
            self._tell_result(trial, res)
        if self.screen is not None:
            start = time.perf_counter()
            self.screen.observe([c.dedup_key() for c in candidates], results)
            self._search_s += time.perf_counter() - start  # charged to the next batch

    def _timings(self, results: list[MeasureResult]) -> list[dict[str, float]]:
        """Each result's share of the batch's search and build wall time (the builds run in parallel: their wall
        time is what passed since ``ask`` less the runs, which go one at a time), and its own run time."""
        if not results:
            return []
        measure_s = sum(r.run_s for r in results)
        build_s = max(time.perf_counter() - self._asked_at - measure_s, 0.0) if self._asked_at else 0.0
        search_s, self._search_s = self._search_s, 0.0
        n = len(results)
        return [{"search": search_s / n, "build": build_s / n, "measure": r.run_s, "build_worker": r.build_s}
                for r in results]

    def _tell_result(self, trial: Trial, res: MeasureResult) -> None:
        mark_outcome(trial, res.status, res.error)
        if res.ok:
            self.study.tell(trial, res.latency_s)
        else:
            self.study.tell(trial, state=TrialState.PRUNED)

    def abandon(self, candidates: list[Candidate]) -> None:
        for cand in candidates:
            trial = self._pending.pop(cand.dedup_key(), None)
            if trial is not None:
                self.study.tell(trial, state=TrialState.FAIL)

    def drain_rejected(self) -> list[Candidate]:
        out, self._rejected = self._rejected, []
        return out


def seen_from_records(records: list) -> dict[str, MeasureResult]:
    """Rebuild the dedup cache from a task's stored records (resuming a run). Baseline records (the
    unscheduled build, no trace) are not points of the search space and stay out."""
    return {schedule_key(r.decisions): MeasureResult(r.status, list(r.latencies_s), r.error)
            for r in records if r.status is not Status.INVALID and r.trace_json is not None}
