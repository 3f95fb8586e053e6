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

The strategy composes three pieces: the study bridge (``search/study.py``: sampler, trial ownership, telling
outcomes), the candidate pool (``search/pool.py``: proposals, mutants, design coverage) and the cost-model screen
(``search/screen.py``). ask: pool -> screen -> study; tell: study + screen.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import Trial

from autosched._tvm import as_python, save_json
from autosched.errors import InvalidConfig
from autosched.records import Candidate, MeasureResult, Status, schedule_key
from autosched.search.base import SearchStrategy
from autosched.search.pool import APPLY_THREADS, MAX_PREBUILT, MAX_REMEMBERED, CandidatePool
from autosched.search.screen import ModelScreen, Proposal
from autosched.search.study import (
    CONSTRAINT,
    ORPHAN_AFTER_S,
    OWNER_ATTR,
    PREDICTED_ATTR,
    SAMPLERS,
    STATUS_ATTR,
    TIMING_ATTR,
    StudyBridge,
    create_sampler,
    mark_outcome,
)
from autosched.spaces.base import SearchSpace

__all__ = [  # the names importers use from here (those of study.py and pool.py re-exported)
    "APPLY_THREADS", "CONSTRAINT", "MAX_PREBUILT", "MAX_REMEMBERED", "ORPHAN_AFTER_S", "OWNER_ATTR", "PREDICTED_ATTR",
    "SAMPLERS", "STATUS_ATTR", "TIMING_ATTR", "OptunaStrategy", "create_sampler", "mark_outcome", "seen_from_records",
]

log = logging.getLogger("autosched.search")


class OptunaStrategy(SearchStrategy):
    def __init__(self, space: SearchSpace, task_key: str, storage: Any, sampler: str | optuna.samplers.BaseSampler
                 = "tpe", seed: int = 0, seen: dict[str, MeasureResult] | None = None, max_tries_per_ask: int = 16,
                 screen: ModelScreen | None = None, about: dict[str, str] | None = None):
        self.space, self.task_key, self.seed = space, task_key, seed
        self.bridge = StudyBridge(space, task_key, storage, sampler, seed, about)
        self._seen: dict[str, MeasureResult] = dict(seen or {})  # dedup key -> result of that schedule
        self._pending: dict[str, Trial] = {}
        self.pool = CandidatePool(space, self.study, screen, seed, self._seen, self._pending)
        self._rejected: list[Candidate] = []
        self._scores: dict[str, float] = {}  # predicted scores of enqueued proposals
        self.max_tries_per_ask = max_tries_per_ask
        self.exhausted = False
        self._search_s = 0.0  # search time not yet charged to a batch (the last refit, the current ask)
        self._asked_at = 0.0  # time.perf_counter() when the last ask returned

    @property
    def study(self) -> optuna.Study:
        return self.bridge.study

    @property
    def screen(self) -> ModelScreen | None:
        return self.pool.screen

    @screen.setter
    def screen(self, screen: ModelScreen | None) -> None:
        self.pool.screen = screen

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
        return self.bridge.propose(params)

    def ask(self, n: int) -> list[Candidate]:
        start = time.perf_counter()
        queued = self.bridge.n_waiting()
        if self.screen is not None and self.screen.ready and queued < n:
            # proposed settings are measured first (in the order queued); the model screens only the rest of
            # the batch, so none of its picks waits for a later batch, ranked by a model refitted since
            for proposal in self._screened(n - queued):
                self.bridge.enqueue(proposal.params)
                self._scores[proposal.key] = proposal.score
        out = self._ask_direct(n)
        self._asked_at = time.perf_counter()
        self._search_s += self._asked_at - start
        return out

    def _screened(self, n: int) -> list[Proposal]:
        """A pool from a throw-away copy of the study (so unmeasured proposals never reach the real one), grown by
        the model-guided search and screened down to ``n``."""
        scratch = self.bridge.scratch(self.seed + len(self._seen) + 1)
        pool, measured = self.pool.gather(scratch, self.bridge.suggest, n)
        if not pool:
            return []
        proposals = self.pool.evolve(self.pool.proposals(pool, list(pool)), n)
        return self.screen.select(proposals, min(n, len(proposals)), measured)

    def _ask_direct(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        tries = duplicates = 0
        while len(out) < n and tries < self.max_tries_per_ask * n:
            if len(self._seen) + len(self._pending) >= self.space.size():
                break  # every distinct setting has been proposed
            tries += 1
            trial = self.bridge.ask_owned()
            params = self.bridge.suggest(trial)
            try:
                sch = self.pool.schedule(params)
            except InvalidConfig as err:
                self._reject(trial, params, str(err))
                repaired = self.pool.prebuild_repair(params, seed=self.seed + trial.number)
                if repaired is not None:  # asked next (a GPU space: most raw settings are illegal), built once
                    self.propose(repaired)
                continue
            cand = Candidate(self.task_key, params, decisions=self.space.effective_decisions(sch),
                             trial_number=trial.number)
            key = cand.dedup_key()
            if key in self._seen or key in self._pending or any(c.dedup_key() == key for c in out):
                self.bridge.tell_duplicate(trial, self._seen.get(key))
                duplicates += 1
                if duplicates >= self.max_tries_per_ask:  # the sampler keeps to what is measured: explore
                    self.propose(self.pool.random_params(len(self._seen) + tries))
                continue
            self._complete(cand, key, trial, sch)
            self._pending[key] = trial
            out.append(cand)
        self.exhausted = len(out) < n
        return out

    def _complete(self, cand: Candidate, key: str, trial: Trial, sch: Any) -> None:
        """Fill in what the builder and the database need of a new candidate (``key``: its dedup key): its trace,
        module and any predicted score."""
        cand.trace_json = as_python(sch.trace.as_json(remove_postproc=False))
        cand.predicted_score = self._scores.pop(key, None)
        if cand.predicted_score is not None:
            self.bridge.mark_predicted(trial, cand.predicted_score)
        if self.screen is not None:
            self.screen.ensure_features(sch, key)
        cand.mod_json = save_json(sch.mod)

    def _reject(self, trial: Trial, params: dict[str, Any], reason: str) -> None:
        self.bridge.reject(trial, reason)
        self._rejected.append(Candidate(self.task_key, params, trial_number=trial.number, invalid_reason=reason))

    def tell(self, candidates: list[Candidate], results: list[MeasureResult]) -> None:
        timings = self._timings(results)
        for cand, res, timing in zip(candidates, results, timings, strict=True):
            key = cand.dedup_key()
            trial = self._pending.pop(key)
            self._seen[key] = res
            self.bridge.tell_measured(trial, res, timing)
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

    def abandon(self, candidates: list[Candidate]) -> None:
        for cand in candidates:
            trial = self._pending.pop(cand.dedup_key(), None)
            if trial is not None:
                self.bridge.fail(trial)

    def drain_rejected(self) -> list[Candidate]:
        out, self._rejected = self._rejected, []
        return out


def seen_from_records(records: list) -> dict[str, MeasureResult]:
    """Rebuild the dedup cache from a task's stored records (resuming a run). Baseline records (the
    unscheduled build, no trace) are not points of the search space and stay out."""
    return {schedule_key(r.decisions): MeasureResult(r.status, list(r.latencies_s), r.error)
            for r in records if r.status is not Status.INVALID and r.trace_json is not None}
