"""Pins how each outcome reaches the Optuna sampler (see the module docstring of optuna_strategy)."""

from __future__ import annotations

import os
import socket
import subprocess

import optuna
import pytest
from optuna.trial import TrialState

from autosched.errors import InvalidConfig, UnknownNameError
from autosched.records import MeasureResult, Status
from autosched.search.optuna_strategy import CONSTRAINT, OWNER_ATTR, SAMPLERS, OptunaStrategy, create_sampler
from autosched.spaces.base import SearchSpace


def _strategy(space, sampler="tpe", seed=0):
    return OptunaStrategy(space, "task", optuna.storages.InMemoryStorage(), sampler, seed)


def test_measured_ok_is_a_complete_trial_with_the_latency(matmul_space):
    s = _strategy(matmul_space)
    (cand,) = s.ask(1)
    s.tell([cand], [MeasureResult(Status.OK, [2e-3, 1e-3, 3e-3])])
    (trial,) = s.study.get_trials()
    assert trial.state is TrialState.COMPLETE and trial.value == pytest.approx(2e-3)
    assert trial.constraints == {CONSTRAINT: 0.0} and trial.user_attrs["status"] == "OK"


@pytest.mark.parametrize("status", [Status.BUILD_ERROR, Status.RUN_ERROR, Status.TIMEOUT, Status.WRONG_RESULT])
def test_measured_failure_is_pruned_and_violates_the_constraint(matmul_space, status):
    s = _strategy(matmul_space)
    ok, bad = s.ask(2)
    s.tell([ok, bad], [MeasureResult(Status.OK, [1e-3]), MeasureResult(status, error="boom")])
    trials = {t.number: t for t in s.study.get_trials()}
    failed = trials[bad.trial_number]
    assert failed.state is TrialState.PRUNED and failed.value is None
    assert failed.user_attrs["status"] == status.value and failed.user_attrs["error"] == "boom"
    assert failed.constraints == {CONSTRAINT: 1.0}
    assert s.study.best_trial.number == ok.trial_number  # a failure is never the best


def test_rejected_candidates_are_pruned_and_never_returned(matmul_space):
    class HalfInvalid(SearchSpace):
        version = 1

        def __init__(self, inner):
            self.inner = inner

        def knobs(self, design=None):
            return self.inner.knobs(design)

        def size(self):
            return self.inner.size()

        def apply(self, params):
            if params["design"] == 0:
                raise InvalidConfig("design 0 is forbidden here")
            return self.inner.apply(params)

        def effective_decisions(self, sch):
            return self.inner.effective_decisions(sch)

    s = _strategy(HalfInvalid(matmul_space), sampler="random", seed=1)
    cands = s.ask(12)
    assert len(cands) == 12 and all(c.params["design"] != 0 for c in cands)
    rejected = s.drain_rejected()
    assert rejected and all(r.invalid_reason == "design 0 is forbidden here" for r in rejected)
    states = {t.number: t.state for t in s.study.get_trials()}
    assert all(states[r.trial_number] is TrialState.PRUNED for r in rejected)
    assert all(s.study.get_trials()[r.trial_number].constraints == {CONSTRAINT: 1.0} for r in rejected)
    assert s.drain_rejected() == []


def test_a_repaired_setting_is_asked_next_and_built_once(matmul_space):
    class Repairing(SearchSpace):  # design 0 is illegal; repair moves a setting to design 1
        version = 1

        def __init__(self):
            self.built = []

        def knobs(self, design=None):
            return matmul_space.knobs(design)

        def size(self):
            return matmul_space.size()

        def apply(self, params):
            self.built.append(dict(params))
            if params["design"] == 0:
                raise InvalidConfig("design 0 is forbidden here")
            return matmul_space.apply(params)

        def repair(self, params, seed=0):
            fixed = {"design": 1, **{k: d.low for k, d in matmul_space.knobs(1).items()}}
            return fixed, matmul_space.apply(fixed)

        def effective_decisions(self, sch):
            return matmul_space.effective_decisions(sch)

    space = Repairing()
    s = _strategy(space, sampler="random", seed=1)
    s.propose({"design": 0, **{k: d.low for k, d in matmul_space.knobs(0).items()}})  # asked first, rejected
    cands = s.ask(2)
    fixed = {"design": 1, **{k: d.low for k, d in matmul_space.knobs(1).items()}}
    assert space.built[0]["design"] == 0 and cands[0].params == fixed  # the repaired setting was asked next
    assert not any(p == fixed for p in space.built)  # with the schedule repair built, not built again


def test_duplicate_schedule_is_not_measured_twice(matmul_space):
    class OnePoint(SearchSpace):
        version = 1

        def knobs(self, design=None):
            return matmul_space.knobs(design)

        def size(self):
            return 10**9

        def apply(self, params):
            return matmul_space.apply(matmul_space.default_params(0))

        def effective_decisions(self, sch):
            return matmul_space.effective_decisions(sch)

    s = _strategy(OnePoint(), sampler="random")
    s.max_tries_per_ask = 4
    first = s.ask(3)
    assert len(first) == 1  # the other proposals were the same schedule
    s.tell(first, [MeasureResult(Status.OK, [1e-3])])
    assert s.ask(2) == [] and s.exhausted
    told = [t for t in s.study.get_trials() if t.user_attrs.get("duplicate")]
    assert told and all(t.value in (None, 1e-3) for t in told)


def test_a_sampler_stuck_on_measured_schedules_is_helped_out_by_random_points(matmul_space):
    """A sampler that keeps proposing what is measured (TPE late in a search) does not end the search: after
    ``max_tries_per_ask`` duplicates in one ask, points drawn at random are proposed until new ones come."""
    s = _strategy(matmul_space)
    fixed = matmul_space.default_params(0)
    s.study.sampler = optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0))
    s.max_tries_per_ask = 4
    first = s.ask(1)
    s.tell(first, [MeasureResult(Status.OK, [1e-3])])
    more = s.ask(3)
    assert len(more) == 3 and not s.exhausted
    assert len({c.dedup_key() for c in first + more}) == 4


def test_exhausted_space_stops_proposing(cpu_target):
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import op_task

    task = op_task("elementwise", (8, 16), cpu_target, 1)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target))
    s = _strategy(space)
    got = s.ask(4)
    assert len(got) == space.size() and s.ask(4) == [] or s.exhausted


def test_same_seed_same_proposals(matmul_space):
    a, b = _strategy(matmul_space, seed=7), _strategy(matmul_space, seed=7)
    c = _strategy(matmul_space, seed=8)
    pa, pb, pc = ([x.params for x in s.ask(5)] for s in (a, b, c))
    assert pa == pb and pa != pc


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_proposes_valid_candidates(matmul_space, name):
    if name == "gp":
        pytest.importorskip("torch")
    s = _strategy(matmul_space, sampler=name)
    for _ in range(2):
        cands = s.ask(3)
        assert cands and all(c.mod_json and c.trace_json for c in cands)
        s.tell(cands, [MeasureResult(Status.OK, [1e-3 * (i + 1)]) for i in range(len(cands))])


def test_unknown_sampler_lists_the_valid_ones():
    with pytest.raises(UnknownNameError) as info:
        create_sampler("annealing", 0)
    assert set(info.value.valid) == set(SAMPLERS)
    assert "tpe" in str(info.value)


def test_abandoned_candidates_fail_and_stale_running_trials_are_failed(matmul_space):
    storage = optuna.storages.InMemoryStorage()
    s = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)
    cands = s.ask(2)
    s.abandon(cands[:1])
    assert s.study.get_trials()[cands[0].trial_number].state is TrialState.FAIL
    # cands[1] is left RUNNING by a live tuner: a second one on the same study leaves it alone
    s2 = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)
    assert s2.study.get_trials()[cands[1].trial_number].state is TrialState.RUNNING
    # ... until that tuner has died: the next strategy on the study fails its trial
    dead = subprocess.Popen(["true"])
    dead.wait()
    trial_id = s.study.get_trials()[cands[1].trial_number]._trial_id
    storage.set_trial_user_attr(trial_id, OWNER_ATTR, [socket.gethostname(), dead.pid, 0.0])
    s3 = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)
    assert s3.study.get_trials()[cands[1].trial_number].state is TrialState.FAIL


def test_a_running_trial_of_another_container_with_this_host_name_is_left_alone(matmul_space):
    """Two containers with one host name (``--network host``) share a study: a PID of the other's is not visible
    here, and its trial must not be failed for it (its host id differs: another PID namespace)."""
    from autosched.db.leases import host_id

    storage = optuna.storages.InMemoryStorage()
    s = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)
    (cand,) = s.ask(1)
    dead = subprocess.Popen(["true"])
    dead.wait()
    other_container = host_id().rsplit("/", 1)[0] + "/4026999999"  # same host name and boot, another namespace
    trial_id = s.study.get_trials()[cand.trial_number]._trial_id
    storage.set_trial_user_attr(trial_id, OWNER_ATTR, [other_container, dead.pid, 0.0])
    s2 = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)
    assert s2.study.get_trials()[cand.trial_number].state is TrialState.RUNNING
    storage.set_trial_user_attr(trial_id, OWNER_ATTR, [host_id(), dead.pid, 0.0])  # this container's: gone
    s3 = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)
    assert s3.study.get_trials()[cand.trial_number].state is TrialState.FAIL


def test_a_trial_names_its_tuner_from_the_moment_it_exists(matmul_space, monkeypatch):
    """A tuner killed between Optuna's ask and anything after it still leaves a trial the next run can fail."""
    storage = optuna.storages.InMemoryStorage()
    s = OptunaStrategy(matmul_space, "task", storage, "tpe", 0)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(optuna.trial.Trial, "set_user_attr", killed)
    with pytest.raises(KeyboardInterrupt):
        s.ask(1)
    (running,) = s.study.get_trials(states=(TrialState.RUNNING,))
    from autosched.db.leases import host_id

    assert running.user_attrs[OWNER_ATTR][:2] == [host_id(), os.getpid()]


def test_a_sibling_shapes_best_is_fitted_into_this_space(matmul_space, cpu_target):
    """One operator at another shape (a shape bucket's matmul) has the same knobs with other ranges: its best
    point, fitted (integer knobs clamped), is a valid point here and is measured next when proposed."""
    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import op_task

    wide = op_task("matmul", (128, 32, 32), cpu_target, settings_for(cpu_target).version)
    wide_space = TraceSearchSpace(wide.mod, wide.target, settings_for(cpu_target), seed=0)
    small, big = _strategy(matmul_space), _strategy(wide_space)
    assert small.space_signature == big.space_signature
    assert matmul_space.knobs() != wide_space.knobs()  # the ranges differ
    knobs = wide_space.knobs()
    highest = {name: (d.high if hasattr(d, "high") else d.choices[0]) for name, d in knobs.items()}
    fitted = small.fitted(highest)
    own = matmul_space.knobs()
    assert fitted is not None
    assert all(own[k].low <= v <= own[k].high for k, v in fitted.items() if hasattr(own[k], "low"))
    assert any(fitted[k] < highest[k] for k in fitted if hasattr(own[k], "low"))  # something was clamped
    assert small.fitted({**fitted, "no_such_knob": 1}) is None
    small.propose({k: v for k, v in fitted.items() if k == "design" or k in matmul_space.knobs(fitted["design"])})
    (cand,) = small.ask(1)
    assert all(cand.params[k] == fitted[k] for k in cand.params)



def test_a_study_stored_before_its_space_gained_a_design_goes_on_in_a_study_of_its_own():
    """Optuna cannot widen the categorical ``design`` knob of a sampled study (TPE raises on the next ask): a task
    whose space has gained a design since (the streaming design for reductions) continues in a new study."""
    import dataclasses

    from autosched.spaces.settings import settings_for
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target
    from tests.spaces.test_streaming import _nhwc_mean

    target = make_target("llvm", 1)
    settings = settings_for(target)
    before = TraceSearchSpace(_nhwc_mean(), target, dataclasses.replace(settings, stream_reductions=False))
    after = TraceSearchSpace(_nhwc_mean(), target, settings)
    storage = optuna.storages.InMemoryStorage()

    def tune(space, n):
        s = OptunaStrategy(space, "mean", storage, "tpe", 0)
        for i in range(n):
            cands = s.ask(1)
            s.tell(cands, [MeasureResult(Status.OK, [1e-3 * (1 + i)])] * len(cands))
        return s

    old = tune(before, 12)  # past TPE's 10 startup trials: the multivariate sampler is at work
    assert tune(before, 1).study.study_name == "autosched-mean"  # the same designs: the same study
    n_old = len(old.study.get_trials())
    new = tune(after, 4)
    assert new.study.study_name == f"autosched-mean@{len(after.designs)}designs"
    assert len(new.study.get_trials()) >= 4 and len(old.study.get_trials()) == n_old
    assert tune(after, 1).study.study_name == new.study.study_name  # and it goes on there
