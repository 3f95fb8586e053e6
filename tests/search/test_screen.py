"""Cost-model screening: more proposals than measurements; screened-out proposals never reach the study or
the database; the online model starts once it has data; predicted scores are stored with the records."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from autosched.cost import FeatureExtractor, RandomCostModel, XGBCostModel
from autosched.db import MemoryDatabase
from autosched.errors import InvalidConfig
from autosched.measure.base import TaskIO
from autosched.records import Status, schedule_key
from autosched.search.optuna_strategy import OptunaStrategy
from autosched.search.screen import ModelScreen
from autosched.spaces.base import SearchSpace
from autosched.testing.fakes import NullBuilder, NullRunner
from autosched.tune import tune_task


def _screen(space, start=None, **kw):
    return ModelScreen(FeatureExtractor(space.context), start_model=start, **kw)


class ByFirstFeature:
    """A model that scores by the first feature (tests set the features)."""

    def predict(self, X):
        return X[:, 0]


def _fitted_random():
    return RandomCostModel(seed=1).fit(np.zeros((1, 1)), np.zeros(1), np.zeros(1))


def test_screened_search_measures_fewer_than_it_proposes(matmul_task, matmul_space):
    screen = _screen(matmul_space, _fitted_random(), pool_factor=4, online=False)
    proposed = []
    original = screen.select

    def spy(pool, n, *args):
        proposed.extend(pool)
        return original(pool, n, *args)

    screen.select = spy
    db, runner = MemoryDatabase(), NullRunner()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    tune_task(matmul_task, strategy, NullBuilder(), runner, db, TaskIO("x", 1), n_trials=12, batch_size=4)
    assert runner.n_run == 12 and len(proposed) >= 3 * 12
    # the real study holds measured trials only: the screened-out proposals lived in a scratch study
    trials = strategy.study.get_trials()
    assert len(trials) == 12 and all(t.state is TrialState.COMPLETE for t in trials)
    stored = {schedule_key(r.decisions) for r in db.records()}
    screened_out = {p.key for p in proposed} - stored
    assert len(screened_out) >= 2 * 12  # proposals the model turned down: none became a record
    assert all(r.predicted_score is not None for r in db.records())  # every measured one was screened


def test_screen_keeps_the_top_scores_plus_exploration(matmul_space):
    from autosched.search.screen import Proposal

    screen = _screen(matmul_space, explore=0.25, seed=0)
    screen.model = ByFirstFeature()
    pool = [Proposal({}, str(i), np.array([float(i)])) for i in range(16)]
    chosen = screen.select(pool, 4)
    assert [p.key for p in chosen[:3]] == ["15", "14", "13"]  # 3 best by the model
    assert chosen[3].key not in {"15", "14", "13"}  # 1 exploration pick from the rest


def test_online_model_starts_after_min_train_measurements(matmul_task, matmul_space):
    screen = _screen(matmul_space, min_train=8)
    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    assert not screen.ready
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), n_trials=8, batch_size=4)
    assert isinstance(screen.model, XGBCostModel) and screen.ready
    recs = db.records()
    assert all(r.predicted_score is None for r in recs)  # nothing was screened before the model existed
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), n_trials=12, batch_size=4)
    assert all(r.predicted_score is not None for r in db.records()[8:])


def test_failed_measurements_train_as_zero_throughput(matmul_task, matmul_space):
    screen = _screen(matmul_space, min_train=4)
    db = MemoryDatabase()
    statuses = iter([Status.RUN_ERROR, Status.OK, Status.OK, Status.TIMEOUT] * 10)
    runner = NullRunner(status_fn=lambda c: next(statuses))
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    tune_task(matmul_task, strategy, NullBuilder(), runner, db, TaskIO("x", 1), n_trials=8, batch_size=4)
    assert screen.model is not None
    failed = [k for k, r in screen._results.items() if not r.ok]
    assert len(failed) == 4


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_screen_works_with_other_samplers(matmul_task, matmul_space, sampler):
    screen = _screen(matmul_space, _fitted_random(), online=False)
    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, optuna.storages.InMemoryStorage(), sampler, 0,
                              screen=screen)
    result = tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), 8, 4)
    assert result.n_new == 8


def test_pool_adds_neighbours_of_the_best_measured_settings(matmul_task, matmul_space):
    """The model also ranks settings one to three knobs away from the best measured ones."""
    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), 16, 4)
    done = sorted(strategy.study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value)
    parents = [t.params for t in done[:2]]  # 16 neighbours come from the best 16 // 8 = 2
    neighbours = strategy.pool.neighbours(16)
    assert len(neighbours) == 16
    for params in neighbours:
        knobs = matmul_space.knobs(params["design"])
        assert all(knobs[k].low <= v <= knobs[k].high for k, v in params.items() if k != "design")
        assert min(sum(p.get(k) != v for k, v in params.items()) for p in parents) <= 3
    assert sum(p not in parents for p in neighbours) >= 8  # most are new points, not copies


def test_designs_the_model_ranks_low_still_get_their_best_settings_measured(matmul_task, matmul_space):
    """Half of each batch at most goes to the best-ranked setting of every design with fewer than ``cover``
    measured model picks, even when the model ranks the whole design last."""
    from autosched.search.screen import Proposal

    assert len(matmul_space.designs) == 3
    screen = _screen(matmul_space, explore=0.0, cover=2, online=False)
    screen.model = ByFirstFeature()
    original = screen.select

    def design_0_first(pool: list[Proposal], n, measured):
        for p in pool:  # the model sees design 0 as far better than the others
            p.features = np.array([100.0 if p.group == 0 else -float(p.group)])
        return original(pool, n, measured)

    screen.select = design_0_first
    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), n_trials=16, batch_size=4)
    picks = strategy.pool.model_picks_per_design()
    assert sum(picks.values()) == 16  # every measurement was a model pick (the model was ready from the start)
    assert picks[1] == picks[2] == 2  # each covered by exactly its quota, then left to the ranking
    assert picks[0] == 12


def test_select_covers_groups_with_few_measured_picks_fewest_first(matmul_space):
    from autosched.search.screen import Proposal

    screen = _screen(matmul_space, explore=0.0, cover=2)
    screen.model = ByFirstFeature()
    pool = [Proposal({}, f"a{i}", np.array([10.0 + i]), group="a") for i in range(8)]
    pool += [Proposal({}, f"b{i}", np.array([float(i)]), group="b") for i in range(3)]
    pool += [Proposal({}, f"c{i}", np.array([5.0 + i]), group="c") for i in range(3)]
    keys = lambda chosen: [p.key for p in chosen]  # noqa: E731
    # b has 0 measured picks, c has 1: b's best, then c's best, then b's second (half the batch at most)
    assert keys(screen.select(pool, 8, {"a": 9, "b": 0, "c": 1})) == ["a7", "a6", "a5", "a4", "b2", "c2",
                                                                       "b1", "a3"]
    # everything covered: plain ranking
    assert keys(screen.select(pool, 4, {"a": 9, "b": 2, "c": 2})) == ["a7", "a6", "a5", "a4"]


class Projection:
    """A fixed linear model on the real program features."""

    def __init__(self, n_features: int):
        self.w = np.random.default_rng(3).normal(size=n_features)

    def predict(self, X):
        return X @ self.w


def test_model_guided_local_search_adds_mutants_of_the_best_predicted(matmul_task, matmul_space):
    """Each generation mutates the n best-predicted proposals one to three knobs at a time: the pool grows with
    settings near the model's favourites, which it predicts better than the pool's average."""
    from autosched.cost.features import N_FEATURES

    screen = _screen(matmul_space, online=False, generations=2, pool_factor=2)
    screen.model = Projection(N_FEATURES)
    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), 8, 4)
    strategy.screen = screen
    pool: dict = {}
    strategy.pool.add(pool, strategy.pool.neighbours(16))
    start = strategy.pool.proposals(pool, list(pool))
    screen.score(start)
    first = {p.key: p for p in start}
    grown = strategy.pool.evolve(list(start), 4)
    new = [p for p in grown if p.key not in first]
    assert len(new) >= 4 and len({p.key for p in grown}) == len(grown)  # new, distinct settings
    screen.score(grown)
    assert np.mean([p.score for p in new]) > np.mean([p.score for p in start])
    for p in new:  # one to three knobs away from an earlier proposal of the same design
        assert min(sum(q.params.get(k) != v for k, v in p.params.items()) for q in grown
                   if q is not p and q.params["design"] == p.params["design"]) <= 3
    screen.generations = 0
    assert strategy.pool.evolve(list(start), 4) == start


def test_screening_works_for_a_space_without_designs(matmul_task, matmul_space):
    """SearchSpace makes the ``design`` knob optional: neighbours and mutants of a flat space mutate its knobs."""

    class Flat(SearchSpace):  # design 0 of the matmul space, with no design knob
        version = 1

        def knobs(self, design=None):
            return matmul_space.knobs(0)

        def size(self):
            return matmul_space.size()

        def apply(self, params):
            return matmul_space.apply({"design": 0, **params})

        def effective_decisions(self, sch):
            return matmul_space.effective_decisions(sch)

    screen = _screen(matmul_space, _fitted_random(), online=False)
    db = MemoryDatabase()
    strategy = OptunaStrategy(Flat(), matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), n_trials=12, batch_size=4)
    recs = db.records()
    assert len(recs) == 12 and all(r.predicted_score is not None for r in recs)
    assert all("design" not in r.params for r in recs)


def test_pool_builds_each_setting_once_and_threads_agree_with_one(matmul_task, matmul_space, monkeypatch):
    """The pool's schedules, built on threads, are the ones a single thread builds; a setting met in an earlier
    pool (legal or not) is not built again, its features come from the screen's cache."""
    import autosched.search.pool as pool_module

    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), 8, 4)
    strategy.screen = _screen(matmul_space, _fitted_random(), online=False)
    batch = strategy.pool.neighbours(24) + [strategy.pool.random_params(7)]  # the last one: declared illegal below
    batch += batch[:3]  # the same settings twice in one batch
    built = []
    original = matmul_space.apply

    def counting(params):
        built.append(dict(params))
        if params == batch[24]:
            raise InvalidConfig("illegal for this test")
        return original(params)

    monkeypatch.setattr(matmul_space, "apply", counting)
    pools = []
    for threads in (1, 4):
        monkeypatch.setattr(pool_module, "APPLY_THREADS", threads)
        strategy.pool._pool_keys.clear()
        pool: dict = {}
        legal = strategy.pool.add(pool, batch)
        pools.append((legal, {k: v[0] for k, v in pool.items()}))
    assert pools[0] == pools[1] and pools[0][0][24] is False and sum(pools[0][0]) == 27
    distinct = len({tuple(sorted(p.items())) for p in batch})
    assert len(built) == 2 * distinct
    strategy.pool.proposals(pool, list(pool))  # featurised: a later pool needs no schedule for them
    built.clear()
    again: dict = {}
    assert strategy.pool.add(again, batch) == pools[0][0]
    assert built == [] and set(again) == set(pool) and all(sch is None for _, sch in again.values())
    assert len(strategy.pool.proposals(again, list(again))) == len(pool)


def test_proposed_settings_go_first_and_the_model_screens_only_the_rest_of_the_batch(matmul_task, matmul_space):
    """Settings proposed from outside (a sibling task's best) take their place in the next batch; the screen
    picks only what is left of it, so no screened pick waits in the queue for a later batch."""
    screen = _screen(matmul_space, _fitted_random(), online=False)
    db = MemoryDatabase()
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), 4, 4)
    design = matmul_space.knobs()["design"].choices[0]
    lows = [{"design": design, **{k: min(d.low + i, d.high) for k, d in matmul_space.knobs(design).items()}}
            for i in (0, 1)]
    assert lows[0] != lows[1]
    assert strategy.propose(lows[0]) and strategy.propose(lows[1])
    assert not strategy.propose(lows[0])  # already queued
    batch = strategy.ask(4)
    assert len(batch) == 4 and [c.params for c in batch[:2]] == lows
    assert all(c.predicted_score is None for c in batch[:2]) and all(c.predicted_score is not None for c in batch[2:])
    assert not strategy.study.get_trials(states=(TrialState.WAITING,))  # nothing left over for later


def test_a_design_the_search_has_left_keeps_a_share_of_the_model_picks(matmul_space):
    """Past ``cover`` picks, a design still gets picks while it has fewer than ``cover_share`` of its fair share
    (all model picks / designs), at most half the batch; one at its share gets none."""
    from autosched.search.screen import Proposal

    screen = _screen(matmul_space, explore=0.0, cover=2, cover_share=1 / 3)
    screen.model = ByFirstFeature()
    pool = [Proposal({}, f"a{i}", np.array([10.0 + i]), group="a") for i in range(8)]
    pool += [Proposal({}, f"b{i}", np.array([float(i)]), group="b") for i in range(8)]
    keys = lambda chosen: [p.key for p in chosen]  # noqa: E731
    assert screen.cover_floor({"a": 60, "b": 2}, 8) == pytest.approx(70 / 6)
    assert keys(screen.select(pool, 8, {"a": 60, "b": 2})) == ["a7", "a6", "a5", "a4", "b7", "b6", "b5", "b4"]
    # b at its share (12 of 70 >= 70 / 6): plain ranking
    assert keys(screen.select(pool, 8, {"a": 50, "b": 12})) == [f"a{i}" for i in range(7, -1, -1)]


def test_a_design_below_its_share_gets_neighbours_of_its_own_best_settings(matmul_task, matmul_space):
    """The pool's samples of a design below its floor include settings one to three knobs from its fastest
    measured ones, not only random settings; a design at its floor gets none."""
    db = MemoryDatabase()
    screen = _screen(matmul_space)
    strategy = OptunaStrategy(matmul_space, matmul_task.key, db.optuna_storage(), "tpe", 0, screen=screen)
    tune_task(matmul_task, strategy, NullBuilder(), NullRunner(), db, TaskIO("x", 1), n_trials=24, batch_size=4)
    designs = list(strategy.pool.model_picks_per_design())
    design = next(d for d in designs if any(p.get("design") == d for p in strategy.pool.fastest()))
    best = [p for p in strategy.pool.fastest() if p.get("design") == design][:4]
    samples = strategy.pool.design_samples({d: (0 if d == design else 100) for d in designs}, 4)
    assert samples and all(s["design"] == design for s in samples)
    near = [s for s in samples if min(sum(b.get(k) != v for k, v in s.items()) for b in best) <= 3]
    assert len(near) >= 2 * strategy.screen.pool_factor
