"""The pool of proposals the cost model screens: the sampler's settings (or legal ones near them, where the space
repairs), neighbours of the best measured settings, samples of designs with few model picks, and mutants of the
model's favourites (a small evolutionary search)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import Trial, TrialState

from autosched.config import resolve_threads
from autosched.errors import InvalidConfig
from autosched.records import MeasureResult, schedule_key
from autosched.search.screen import ModelScreen, Proposal
from autosched.search.study import PREDICTED_ATTR, params_key
from autosched.spaces.base import SearchSpace

MAX_PREBUILT = 256  # repaired settings' schedules kept until the sampler asks them (each built once)
MAX_REMEMBERED = 100_000  # pooled settings whose schedule key is kept (a few MB), so none is built twice
APPLY_THREADS = min(4, resolve_threads())  # threads building a pool's schedules

Pool = dict[str, tuple[dict[str, Any], Any]]  # schedule key -> (setting, its schedule; None where featurised before)


class CandidatePool:
    """Builds pools of legal, not yet measured settings of ``space`` for ``screen``.

    ``seen`` (schedule key -> result) and ``pending`` (schedule key -> trial) are the strategy's own dicts, read
    here: their settings stay out of pools, and the number measured seeds each round's random draws. ``study`` is
    read for the measured settings."""

    def __init__(self, space: SearchSpace, study: optuna.Study, screen: ModelScreen | None, seed: int,
                 seen: dict[str, MeasureResult], pending: dict[str, Trial]):
        self.space, self.study, self.screen, self.seed = space, study, screen, seed
        self.seen, self.pending = seen, pending
        self._prebuilt: dict[tuple, Any] = {}  # a repaired setting (params_key) -> the schedule repair built
        self._pool_keys: dict[tuple, str | None] = {}  # a pooled setting -> its schedule key (None: illegal)

    def gather(self, scratch: optuna.Study, suggest: Callable[[Trial], dict[str, Any]], n: int
               ) -> tuple[Pool, dict[Any, int]]:
        """A pool for a batch of ``n``: ``n * pool_factor`` legal settings sampled from ``scratch`` (a throw-away
        copy of the study), neighbours of the best measured settings and samples of designs below their floor;
        with the model picks measured per design."""
        pool: Pool = {}
        want, tries = n * self.screen.pool_factor, 0
        while len(pool) < want and tries < want * 4:
            trials = [scratch.ask() for _ in range(min(want - len(pool), want * 4 - tries))]
            tries += len(trials)
            legal = self.add(pool, [suggest(trial) for trial in trials])
            for trial, ok in zip(trials, legal, strict=True):
                if not ok:
                    scratch.tell(trial, state=TrialState.PRUNED)
            # a pooled trial is left RUNNING in the scratch study: the constant liar spreads the pool
        self.add(pool, self.neighbours(2 * want))
        measured = self.model_picks_per_design()
        self.add(pool, self.design_samples(measured, n))
        return pool, measured

    def proposals(self, pool: Pool, keys: list[str]) -> list[Proposal]:
        X = self.screen.features([pool[k][1] for k in keys], keys)  # a schedule is None where featurised before
        return [Proposal(pool[k][0], k, x, group=pool[k][0].get("design")) for k, x in zip(keys, X, strict=True)]

    def evolve(self, proposals: list[Proposal], n: int) -> list[Proposal]:
        """Model-guided local search (MetaSchedule's evolutionary search, small): for ``screen.generations``
        rounds, the ``n`` best-predicted proposals each get ``2 * pool_factor`` mutants added to the pool. The
        sampler and one-step neighbours of measured settings rarely reach a good schedule that is several
        small steps away; the model, cheap next to a measurement, walks there."""
        rng = np.random.default_rng(self.seed + 104729 * (len(self.seen) + 1))
        known = {p.key for p in proposals}
        for _ in range(self.screen.generations):
            self.screen.score(proposals)
            pool: Pool = {}
            parents = sorted(proposals, key=lambda p: -p.score)[:n]
            self.add(pool, [self.mutate(parent.params, rng) for parent in parents
                            for _ in range(2 * self.screen.pool_factor)])
            new = [k for k in pool if k not in known]
            if not new:
                break
            proposals += self.proposals(pool, new)
            known.update(new)
        return proposals

    # --- design coverage ---------------------------------------------------------------------------------------
    def model_picks_per_design(self) -> dict[Any, int]:
        """Design -> screened proposals measured so far (0 for every design without one; {} for one design)."""
        design = self.space.knobs().get("design")
        if not isinstance(design, CategoricalDistribution):
            return {}
        counts = dict.fromkeys(design.choices, 0)
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if PREDICTED_ATTR in t.user_attrs and t.params.get("design") in counts:
                counts[t.params.get("design")] += 1
        return counts

    def design_samples(self, measured: dict[Any, int], batch: int) -> list[dict[str, Any]]:
        """For every design with fewer measured model picks than ``screen.cover_floor`` (once ``batch`` is
        measured): random settings, and settings a few knobs away from its best measured ones (the sampler stops
        proposing designs it has seen do badly, and the neighbours of the task's best are all of the leading
        design, so the pool may lack them)."""
        rng = np.random.default_rng(self.seed + 7919 * (len(self.seen) + 1))
        out, floor = [], self.screen.cover_floor(measured, batch)
        fastest = self.fastest()  # read once, whatever the number of designs below the floor
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

    # --- building ----------------------------------------------------------------------------------------------
    def add(self, pool: Pool, batch: list[dict[str, Any]]) -> list[bool]:
        """Add each legal, not yet measured setting of ``batch`` (or, where the space repairs, a legal one near
        it) to the pool; False for each illegal one. Settings met before are not built again: their schedule
        key (or illegality) is remembered, and their features with the screen (the pool then holds no
        schedule for them). The others' schedules are built on a few threads (TVM's trace replay and
        postprocessors run outside the GIL): a proposal's cost is mostly this."""
        if len(self._pool_keys) >= MAX_REMEMBERED:
            self._pool_keys.clear()
        by_key = {params_key(p): p for p in batch}
        todo = [k for k in by_key if k not in self._pool_keys]
        with ThreadPoolExecutor(APPLY_THREADS) as threads:
            built = list(threads.map(lambda k: self._try_apply(by_key[k]), todo))
        fresh: dict[tuple, tuple[dict[str, Any], Any, str]] = {}
        for k, sch in zip(todo, built, strict=True):
            params = by_key[k]
            if sch is None:
                repaired = self.repaired(params, seed=self.seed + len(pool))
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
            k = params_key(params)
            params, sch, key = fresh.get(k, (params, None, self._pool_keys.get(k)))
            if key is None:
                legal.append(False)
                continue
            legal.append(True)
            if key in self.seen or key in self.pending or key in pool:
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

    def schedule(self, params: dict[str, Any]) -> Any:
        """``params``' schedule: the one built when it was repaired, else built now (InvalidConfig if illegal)."""
        return self._prebuilt.pop(params_key(params), None) or self.space.apply(params)

    def repaired(self, params: dict[str, Any], seed: int) -> tuple[dict[str, Any], Any] | None:
        """A legal setting near the rejected ``params`` and its schedule, where the space repairs (GPU spaces)."""
        return self.space.repair(params, seed=seed)

    def prebuild_repair(self, params: dict[str, Any], seed: int) -> dict[str, Any] | None:
        """A legal setting near the rejected ``params`` (``repaired``), its schedule kept for ``schedule``; None
        where the space does not repair it."""
        repaired = self.repaired(params, seed=seed)
        if repaired is None:
            return None
        if len(self._prebuilt) >= MAX_PREBUILT:
            self._prebuilt.clear()
        self._prebuilt[params_key(repaired[0])] = repaired[1]
        return repaired[0]

    # --- mutation ----------------------------------------------------------------------------------------------
    def neighbours(self, n: int) -> list[dict[str, Any]]:
        """``n`` settings one to three knobs away from the best measured ones (the sampler alone rarely proposes
        the small steps that take a good schedule to a better one)."""
        rng = np.random.default_rng(self.seed + len(self.seen))
        return self._mutants(self.fastest()[: max(1, n // 8)], n, rng)

    def fastest(self) -> list[dict[str, Any]]:
        """Settings of the measured trials, fastest first."""
        done = sorted(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.value)
        return [t.params for t in done]

    def _mutants(self, parents: list[dict[str, Any]], n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        """``n`` mutations of ``parents`` in turn (none without parents)."""
        return [self.mutate(parents[i % len(parents)], rng) for i in range(n)] if parents else []

    def mutate(self, params: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """``params`` with one to three knobs of its design set at random (layer_norm: the fast kernels are three
        compute locations away from where a search of one- and two-knob steps settles)."""
        out, design = dict(params), params.get("design")  # a space may have no designs (SearchSpace.knobs)
        knobs = [name for name in self.space.knobs(design) if name != "design"]
        names = rng.choice(knobs, size=min(len(knobs), int(rng.integers(1, 4))), replace=False)
        out.update(self._random_knobs(design, rng, [str(name) for name in names]))
        return out

    def random_params(self, seed: int) -> dict[str, Any]:
        """A point drawn uniformly from the space (``uniform_params``), reproducible by ``seed``."""
        return uniform_params(self.space, np.random.default_rng([self.seed, seed]))


def uniform_params(space: SearchSpace, rng: np.random.Generator) -> dict[str, Any]:
    """A point drawn uniformly from ``space`` with ``rng``: the design first, then each of its knobs."""
    knobs, params = space.knobs(), {}
    if isinstance(knobs.get("design"), CategoricalDistribution):
        params["design"] = knobs["design"].choices[rng.integers(len(knobs["design"].choices))]
        knobs = space.knobs(params["design"])
    for name, dist in knobs.items():
        if name == "design":
            continue
        if isinstance(dist, IntDistribution):
            params[name] = int(dist.low + dist.step * rng.integers((dist.high - dist.low) // dist.step + 1))
        elif isinstance(dist, CategoricalDistribution):
            params[name] = dist.choices[rng.integers(len(dist.choices))]
    return params
