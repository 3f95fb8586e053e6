"""Tuning a whole model for real (tiny budget): baselines recorded, budget shared, resumable, and the
compiled model uses what was tuned and matches ONNX Runtime."""

from __future__ import annotations

import threading

import pytest
from onnx_graphs import redundant

from autosched.config import TuneConfig
from autosched.db import MemoryDatabase, open_database
from autosched.deploy.build import TUNED, compile_model
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.errors import UserInputError
from autosched.graph.frontends import load_model
from autosched.graph.passes import extract_tasks, rewrite
from autosched.measure.base import TaskIO
from autosched.records import Candidate, MeasureResult, Status
from autosched.scheduler.model_tuning import DEFAULT_BUILD_PATIENCE, tune_model_tasks
from autosched.session import TuningSession
from autosched.spaces.settings import settings_for
from autosched.spaces.trace_space import TraceSearchSpace
from autosched.tasks import make_target, op_task
from autosched.testing.fakes import ListStrategy, NullBuilder, NullRunner, hashed_latency
from autosched.tune import BASELINE_DECISIONS, Deadline, tune_task

pytest.importorskip("onnxruntime")


def test_tune_model_for_real_then_compile_and_resume(tmp_path, cpu_target):
    model = load_model(redundant()[0])
    tasks = extract_tasks(rewrite(model.mod, cpu_target), cpu_target, settings_for(cpu_target).version)
    db = open_database(str(tmp_path / "model.db"))
    cfg = TuneConfig(n_trials=4, n_threads=1, batch_size=2, cost_model="none", repeat=2, min_repeat_ms=1)
    seen = []
    with TuningSession(cfg, tasks[0].target_json) as session:
        result = tune_model_tasks(session, tasks, db, cfg.n_trials, seen.append)
    assert result.n_new == 4 * len(tasks) - len(tasks)  # the baselines were measured before the count began
    assert sum(s.n_trials for s in result.states) == 4 * len(tasks)
    for task in tasks:
        records = db.records(task.key)
        assert sum(r.decisions == BASELINE_DECISIONS for r in records) == 1
    assert [p.task_name.startswith("untuned build") for p in seen[:len(tasks)]] == [True] * len(tasks)
    estimates = [p.estimated_s for p in seen[len(tasks):]]
    assert seen[-1].n_done == 4 * len(tasks) and estimates[-1] <= estimates[0]
    assert result.estimated_s <= result.untuned_s

    compiled = compile_model(model, cpu_target, db)
    assert set(compiled.sources.values()) == {TUNED}
    inputs = model.random_inputs(1)
    want = run_onnxruntime(onnxruntime_session(model, 1), model, inputs)
    assert max_relative_error(compiled(*inputs), want) < 1e-4

    with TuningSession(cfg, tasks[0].target_json) as session:  # resuming with the same budget: nothing to do
        again = tune_model_tasks(session, tasks, db, cfg.n_trials)
    assert again.n_new == 0


# --- time budgets and cheap tasks, with a fake clock: no TVM builds ---------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class EndlessStrategy(ListStrategy):
    """Distinct candidates without end; a space of its own (no sibling sharing)."""

    def __init__(self, task):
        super().__init__([Candidate(task.key, {"i": i}, [task.name, i]) for i in range(1000)])
        self.space_signature = task.key

    def propose(self, params) -> bool:
        return False


class FakeSession:
    """A tuning session whose every measurement (baseline, default schedule, search trial) takes
    ``s_per_measurement`` seconds of a fake clock; a search candidate is 0.5-1x the task's untuned latency."""

    def __init__(self, untuned_s: dict[str, float], s_per_measurement: float = 0.5, **config):
        self.config = TuneConfig(batch_size=4, **config)
        self.clock, self.untuned_s, self.step_s = FakeClock(), untuned_s, s_per_measurement
        self.builder, self.runner = NullBuilder(), NullRunner(self._latency)
        self.device = "cpu"
        self.searched: list[str] = []  # the tasks a search strategy was made for

    def _latency(self, cand: Candidate) -> float:
        self.clock.now += self.step_s
        return self.untuned_s[cand.task_key] * hashed_latency(cand) / 2e-3

    def measure_unscheduled(self, task) -> MeasureResult:
        self.clock.now += self.step_s
        return MeasureResult(Status.OK, [self.untuned_s[task.key]] * 3)

    def prepare_io(self, task) -> TaskIO:
        return TaskIO("unused.npz", 1)

    def strategy(self, task, db) -> EndlessStrategy:
        self.searched.append(task.info["pattern"] + ":" + task.name)
        return EndlessStrategy(task)

    tune = TuningSession.tune  # the real round: the fake's builder, runner, inputs and strategies


@pytest.fixture(scope="module")
def model_tasks(cpu_target):
    """A dense layer and a GELU (about half the untuned time each), a bias add (0.25 %) and a small dense."""
    version = settings_for(cpu_target).version
    specs = [("matmul", (16, 16, 16), "out-elementwise-fusable", 4e-3), ("elementwise", (64,), "elementwise", 4e-3),
             ("elementwise", (32,), "elementwise", 2e-5), ("matmul", (8, 8, 8), "out-elementwise-fusable", 1e-5)]
    tasks = []
    for op, shape, pattern, _ in specs:
        tasks.append(op_task(op, shape, cpu_target, version))
        tasks[-1].info["pattern"] = pattern
    return tasks, {t.key: untuned for t, (*_, untuned) in zip(tasks, specs, strict=True)}


def _records_by_task(db, tasks):
    return {t.name: db.records(t.key) for t in tasks}


def test_time_budget_stops_in_time_with_every_measurement_saved_and_cheap_tasks_unsearched(model_tasks):
    tasks, untuned = model_tasks
    session, db = FakeSession(untuned), MemoryDatabase()
    deadline = Deadline.after(20.0, session.clock)
    result = tune_model_tasks(session, tasks, db, None, deadline=deadline)
    assert 18.0 <= session.clock.now <= 20.0 and result.out_of_time  # the last round was shortened to fit
    records = _records_by_task(db, tasks)
    measured = sum(db.n_measured(t.key) for t in tasks)
    assert measured == session.runner.n_run + len(tasks) == sum(s.n_trials for s in result.states)
    assert measured == round(20.0 / 0.5)  # every fake half-second of the budget was a saved measurement
    dense, gelu, bias, small = (records[t.name] for t in tasks)
    assert len(bias) == 2 and bias[0].decisions == BASELINE_DECISIONS and bias[1].trace_json is not None  # default
    for task in tasks:  # every task's default measured right after its baseline: compile applies no unmeasured one
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=session.config.seed)
        assert records[task.name][1].params == space.default_schedule()[0], task.name
    # defaults are built with more patience than a search's candidates (built once; compile falls back to them)
    assert set(session.builder.timeouts) == {None, DEFAULT_BUILD_PATIENCE * session.config.build_timeout_for("cpu")}
    assert len(gelu) > 8 and len(dense) > 8  # the high-share GELU is searched like the dense layer
    assert set(session.searched[:2]) == {"out-elementwise-fusable:" + tasks[0].name, "elementwise:" + tasks[1].name}
    assert "elementwise:" + tasks[2].name not in session.searched
    assert (result.n_tasks, result.n_tuned, result.n_default, result.unmeasured) == (4, 3, 1, [])
    assert [s.cheap for s in result.states] == [False, False, True, False]


class FastDenseSession(FakeSession):
    """Every schedule of the first task runs 20x faster than its untuned build (a matmul's default)."""

    def __init__(self, untuned_s: dict[str, float], fast_key: str, **config):
        super().__init__(untuned_s, **config)
        self.fast_key = fast_key

    def _latency(self, cand: Candidate) -> float:
        return super()._latency(cand) / (20 if cand.task_key == self.fast_key else 1)


def test_a_glue_task_cheap_by_the_untuned_latency_is_searched_once_the_defaults_cut_the_estimate(model_tasks):
    tasks, untuned = model_tasks
    dense, bias = tasks[0], tasks[2]  # the bias add: 0.5 % of the untuned latency, 5-20 % of the defaults'
    session, db = FastDenseSession(untuned, dense.key), MemoryDatabase()
    result = tune_model_tasks(session, [dense, bias], db, 8)
    assert not any(s.cheap for s in result.states) and result.n_default == 0
    assert "elementwise:" + bias.name in session.searched


def test_on_a_gpu_only_the_cheap_tasks_defaults_are_measured():
    # a GPU group with no record gets dlight's schedule (the baseline itself): the search decides the rest
    target = make_target("sm_80")
    version = settings_for(target).version
    dense, bias = op_task("matmul", (64, 64, 64), target, version), op_task("elementwise", (32,), target, version)
    dense.info["pattern"], bias.info["pattern"] = "out-elementwise-fusable", "elementwise"
    session, db = FakeSession({dense.key: 4e-3, bias.key: 2e-5}), MemoryDatabase()
    tune_model_tasks(session, [dense, bias], db, 3)
    for task, measured in ((dense, False), (bias, True)):
        space = TraceSearchSpace(task.mod, target, settings_for(target), seed=session.config.seed)
        default = space.default_schedule()[0]
        assert any(r.params == default for r in db.records(task.key)) == measured, task.name


def test_a_small_task_at_two_threads_has_its_serial_default_measured_beside_the_parallel_one():
    # waking the thread pool costs more than a small kernel: both defaults are measured, compile takes the faster
    target = make_target("llvm", 2)
    version = settings_for(target).version
    small, big = op_task("elementwise", (512,), target, version), op_task("elementwise", (65536,), target, version)
    for task in (small, big):
        task.info["pattern"] = "elementwise"
    session, db = FakeSession({small.key: 2e-5, big.key: 2e-5}), MemoryDatabase()
    tune_model_tasks(session, [small, big], db, 2)
    for task, n_defaults in ((small, 2), (big, 1)):
        space = TraceSearchSpace(task.mod, target, settings_for(target), seed=session.config.seed)
        defaults = [space.default_schedule()[0]] + ([space.serial_default()[0]] if n_defaults == 2 else [])
        measured = [r.params for r in db.records(task.key) if r.trace_json is not None]
        assert measured == defaults, task.name
    assert space.serial_default() is None


def test_a_resumed_run_whose_first_proposals_take_the_time_left_ends(model_tasks):
    """Resumed on a database holding every baseline and default (no timing to go by): the first round's proposals
    take the whole budget, so its batch is dropped and the run ends (it used to start round after round, each
    ending at once, out of time, without end)."""
    tasks, untuned = model_tasks
    session, db = FakeSession(untuned), MemoryDatabase()
    tune_model_tasks(session, tasks, db, 3)  # baselines and defaults (and a trial each) in the database

    class SlowProposals(EndlessStrategy):
        def ask(self, n):
            session.clock.now += 60.0  # longer than the budget
            return super().ask(n)

    session.strategy = lambda task, db: SlowProposals(task)
    n_before = sum(db.n_measured(t.key) for t in tasks)
    results = []
    run = threading.Thread(target=lambda: results.append(
        tune_model_tasks(session, tasks, db, None, deadline=Deadline.after(5.0, session.clock))), daemon=True)
    run.start()
    run.join(timeout=30)  # a failure, not a hung suite
    assert not run.is_alive(), "the run did not end"
    [result] = results
    assert result.out_of_time and result.n_new == 0
    assert sum(db.n_measured(t.key) for t in tasks) == n_before  # the dropped batch was not measured


def test_time_budget_ending_during_the_baselines_keeps_the_measured_ones(model_tasks):
    tasks, untuned = model_tasks
    session, db = FakeSession(untuned), MemoryDatabase()
    result = tune_model_tasks(session, tasks, db, 64, deadline=Deadline.after(1.2, session.clock))
    assert session.clock.now == 1.0 and result.out_of_time  # a third baseline (0.5 s) would not have fit
    assert [len(db.records(t.key)) for t in tasks] == [1, 1, 0, 0]
    assert result.unmeasured == tasks[2:] and result.n_tasks == 4 and session.searched == []


def test_the_trial_budget_ends_the_run_when_it_comes_first(model_tasks):
    tasks, untuned = model_tasks
    session, db = FakeSession(untuned), MemoryDatabase()
    result = tune_model_tasks(session, tasks, db, 5, deadline=Deadline.after(1e4, session.clock))
    assert sum(db.n_measured(t.key) for t in tasks) == 20 and not result.out_of_time
    with pytest.raises(UserInputError, match="needs a time budget"):
        tune_model_tasks(session, tasks, db, None)


def test_a_round_is_cut_short_between_batches_when_the_next_would_not_end_in_time(matmul_task):
    clock = FakeClock()

    def latency(cand):
        clock.now += 0.25  # a batch of 4: 1 s
        return 1e-3

    db, runner = MemoryDatabase(), NullRunner(latency)
    cands = [Candidate(matmul_task.key, {"i": i}, [i]) for i in range(40)]
    result = tune_task(matmul_task, ListStrategy(cands), NullBuilder(), runner, db, TaskIO("unused.npz", 1), 40,
                       batch_size=4, deadline=Deadline.after(2.6, clock))
    assert clock.now == 2.0 and result.out_of_time  # a third batch (1 s) would have ended at 3.0
    assert result.n_new == 8 == db.n_measured(matmul_task.key) == runner.n_run


def test_a_batch_whose_proposals_took_the_time_left_is_dropped_unmeasured(matmul_task):
    clock = FakeClock()

    class SlowProposals(ListStrategy):
        def ask(self, n):
            clock.now += 3.0  # e.g. the cost model ranking a big pool
            return super().ask(n)

        def abandon(self, candidates):
            self.abandoned = candidates

    db, runner = MemoryDatabase(), NullRunner()
    strategy = SlowProposals([Candidate(matmul_task.key, {"i": i}, [i]) for i in range(8)])
    result = tune_task(matmul_task, strategy, NullBuilder(), runner, db, TaskIO("unused.npz", 1), 8,
                       batch_size=4, deadline=Deadline.after(2.0, clock))
    assert result.out_of_time and result.n_new == 0 == runner.n_run == len(db.records(matmul_task.key))
    assert len(strategy.abandoned) == 4

