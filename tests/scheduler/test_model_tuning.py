"""Tuning a whole model for real (tiny budget): baselines recorded, budget shared, resumable, and the
compiled model uses what was tuned and matches ONNX Runtime."""

from __future__ import annotations

import pytest
from onnx_graphs import redundant

from autosched._tvm import as_python, save_json
from autosched.config import TuneConfig
from autosched.db import MemoryDatabase, TaskRow, open_database
from autosched.deploy.build import TUNED, compile_model
from autosched.deploy.reference import max_relative_error, onnxruntime_session, run_onnxruntime
from autosched.errors import UserInputError
from autosched.graph.frontends import load_model
from autosched.graph.passes import extract_tasks, rewrite
from autosched.measure.base import TaskIO
from autosched.records import Candidate, MeasureResult, Status
from autosched.scheduler.model_tuning import DEFAULT_BUILD_PATIENCE, share_sibling_bests, tune_model_tasks
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


def test_a_float32_matmul_s_defaults_include_its_other_micro_kernel_tiles(cpu_target):
    """Which register tile and unroll depth is fastest depends on the shape: the default (the first tile) and the
    ``OTHER_MICROKERNELS`` are measured before any search, so a task the search never reaches gets the fastest."""
    from autosched._tvm import llvm_vector_bits
    from autosched.scheduler.model_tuning import OTHER_MICROKERNELS, default_candidates
    from autosched.spaces.microkernel import DEFAULT_UNROLL, microkernel_params

    task = op_task("dense", (96, 256, 384), cpu_target, settings_for(cpu_target).version)
    space = TraceSearchSpace(task.mod, cpu_target, settings_for(cpu_target), seed=0)
    params = [c.params for c in default_candidates(task, MemoryDatabase(), seed=0)]
    assert params[0] == space.default_schedule()[0] == microkernel_params(space, llvm_vector_bits(cpu_target),
                                                                          unroll=DEFAULT_UNROLL)[0]
    others = [microkernel_params(space, llvm_vector_bits(cpu_target), unroll=unroll)[tile]
              for tile, unroll in OTHER_MICROKERNELS]
    assert params[1:1 + len(others)] == others
    assert len({str(p) for p in params}) == len(params)  # nothing twice


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


def test_a_task_tuned_at_another_thread_count_starts_from_its_best_schedules():
    """A model tuned at 2 threads, then at 1 in the same database: each task's first candidates are the best
    schedules of its 2-thread twin (valid at any thread count), best first; without such a twin, none."""
    import optuna

    from autosched.db import TaskRow
    from autosched.scheduler.model_tuning import start_from_other_thread_counts
    from autosched.search.optuna_strategy import OptunaStrategy
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target
    from autosched.tune import to_record

    def strategy(task, seed):
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=seed)
        return OptunaStrategy(space, task.key, optuna.storages.InMemoryStorage(), "random", seed)

    one, two = make_target("llvm", 1), make_target("llvm", 2)
    at_one, at_two = (op_task("matmul", (32, 32, 32), t, settings_for(t).version) for t in (one, two))
    db = MemoryDatabase()
    assert start_from_other_thread_counts(at_one, strategy(at_one, 1), db) == 0
    tuned = strategy(at_two, 0).ask(6)
    db.commit_task(TaskRow(at_two.key, at_two.name, at_two.target_json, at_two.space_version, "{}", at_two.flops, {}))
    latencies = [6e-3, 2e-3, 5e-3, 1e-3, 4e-3, 3e-3]
    db.commit([to_record(at_two, c, MeasureResult(Status.OK, [s])) for c, s in zip(tuned, latencies, strict=True)])
    search = strategy(at_one, 1)
    assert start_from_other_thread_counts(at_one, search, db, k=3) == 3
    best_first = [tuned[i].params for i in (3, 1, 5)]
    assert [c.params for c in search.ask(3)] == [search.fitted(p) for p in best_first]


def test_a_task_tuned_on_another_cpu_starts_from_its_best_schedules():
    """A shipped log of another CPU of this architecture (here: Haswell, 1 thread; tuning here at 2): its best
    schedules are this search's first candidates, measured here like any other."""
    import optuna

    from autosched.db import TaskRow
    from autosched.scheduler.model_tuning import start_from_other_thread_counts
    from autosched.search.optuna_strategy import OptunaStrategy
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target
    from autosched.tune import to_record

    def strategy(task, seed):
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=seed)
        return OptunaStrategy(space, task.key, optuna.storages.InMemoryStorage(), "random", seed)

    here, haswell = make_target("llvm", 2), make_target('{"kind": "llvm", "mcpu": "haswell", "num-cores": 1}')
    mine, theirs = (op_task("matmul", (32, 32, 32), t, settings_for(t).version) for t in (here, haswell))
    db = MemoryDatabase()
    tuned = strategy(theirs, 0).ask(4)
    db.commit_task(TaskRow(theirs.key, theirs.name, theirs.target_json, theirs.space_version, "{}", theirs.flops, {}))
    db.commit([to_record(theirs, c, MeasureResult(Status.OK, [s]))
               for c, s in zip(tuned, [4e-3, 1e-3, 3e-3, 2e-3], strict=True)])
    search = strategy(mine, 1)
    assert start_from_other_thread_counts(mine, search, db, k=2) == 2
    assert [c.params for c in search.ask(2)] == [search.fitted(tuned[i].params) for i in (1, 3)]


def test_another_cpus_best_schedule_is_measured_with_the_defaults():
    """A task the search never reaches still gets another CPU's best schedule measured here (with its defaults),
    so compile takes it where it is faster; measured once (a second call finds it in the database)."""
    from autosched.db import TaskRow
    from autosched.records import schedule_key
    from autosched.scheduler.model_tuning import default_candidates
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target
    from autosched.tune import to_record

    here, haswell = make_target("llvm", 2), make_target('{"kind": "llvm", "mcpu": "haswell", "num-cores": 1}')
    mine, theirs = (op_task("matmul", (32, 32, 64), t, settings_for(t).version) for t in (here, haswell))
    db = MemoryDatabase()
    n_own = len(default_candidates(mine, db, 0))
    space = TraceSearchSpace(theirs.mod, haswell, settings_for(haswell), seed=3)
    sch = space.apply(space.default_params(len(space.designs) - 1))
    db.commit_task(TaskRow(theirs.key, theirs.name, theirs.target_json, theirs.space_version, "{}", theirs.flops, {}))
    db.commit([to_record(theirs, Candidate(theirs.key, {}, space.effective_decisions(sch),
                                           as_python(sch.trace.as_json(remove_postproc=False))),
                         MeasureResult(Status.OK, [1e-4]))])
    cands = default_candidates(mine, db, 0)
    assert len(cands) == n_own + 1 and schedule_key(cands[-1].decisions) == schedule_key(db.records()[0].decisions)
    db.commit([to_record(mine, cands[-1], MeasureResult(Status.OK, [2e-4]))])
    assert len(default_candidates(mine, db, 0)) == n_own  # measured: not again


def test_a_task_starts_from_the_refitted_best_schedules_of_tasks_like_it():
    """A matmul of 40 rows searched after matmuls of 64 and 512 rows (same designs, other sizes): the best
    schedule of the nearest in FLOPs (64 rows), refitted, is its first candidate; a softmax (no design in common)
    and a budget of 0 queue nothing."""
    import math

    import optuna

    from autosched.apply import schedule_from_record
    from autosched.db import TaskRow
    from autosched.scheduler.model_tuning import start_from_relatives
    from autosched.search.optuna_strategy import OptunaStrategy
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target
    from autosched.tune import to_record

    def strategy(task, seed):
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target), seed=seed)
        return OptunaStrategy(space, task.key, optuna.storages.InMemoryStorage(), "random", seed)

    target = make_target("llvm", 1)
    version = settings_for(target).version
    m64, m512, m40 = (op_task("matmul", (m, 32, 48), target, version) for m in (64, 512, 40))
    softmax = op_task("softmax", (8, 64), target, version)
    tasks = {t.key: t for t in (m64, m512, m40, softmax)}
    db, searched = MemoryDatabase(), {}
    for task, seed in ((m64, 0), (m512, 1)):
        searched[task.key] = strategy(task, seed)
        db.commit_task(TaskRow(task.key, task.name, task.target_json, version, "{}", task.flops, {}))
        cands = searched[task.key].ask(4)
        db.commit([to_record(task, c, MeasureResult(Status.OK, [s]))
                   for c, s in zip(cands, (4e-3, 1e-3, 3e-3, 2e-3), strict=True)])
    search = strategy(m40, 2)
    assert start_from_relatives(m40, search, searched, tasks, db, k=0) == 0
    assert start_from_relatives(softmax, strategy(softmax, 3), searched, tasks, db, k=2) == 0
    assert start_from_relatives(m40, search, searched, tasks, db, k=1) == 1
    donor = schedule_from_record(m64.mod, db.best(m64.key, m64.target_json)).trace
    (first,) = search.ask(1)
    assert first.params == search.space.transfer_params(donor)
    sch = search.space.apply(first.params)
    rows = next(sch.trace.decisions[i] for i in sch.trace.insts if i.kind.name == "SamplePerfectTile")
    assert math.prod(int(f) for f in rows) == 40  # the rows' tiling, refitted from 64


class SiblingStrategy:
    """A strategy's side of sibling sharing: one space signature, fitted = the same point, a queue."""

    space_signature = "conv"

    def __init__(self) -> None:
        self.queue: list[dict] = []

    def fitted(self, params: dict) -> dict:
        return params

    def propose(self, params: dict) -> bool:
        if params in self.queue:
            return False
        self.queue.append(params)
        return True


def test_sibling_bests_come_nearest_first_and_a_few_a_round(model_tasks):
    """Every same-knob task's best, each round, would fill a model's rounds (twenty convolutions): a round gets
    at most ``k`` new ones, from the siblings nearest in FLOPs, and a best already queued is not queued again."""
    from types import SimpleNamespace

    tasks, _ = model_tasks
    own = tasks[0]
    siblings = {f"s{i}": SimpleNamespace(flops=own.flops * 2.0 ** (i - 2), target_json="t") for i in range(5)}
    bests = {key: SimpleNamespace(params={"from": key}, trace_json="[]") for key in siblings}
    db = SimpleNamespace(best=lambda key, target_json: bests.get(key))
    strategies = {own.key: SiblingStrategy(), **{key: SiblingStrategy() for key in siblings},
                  "other": EndlessStrategy(own)}  # another space: never a sibling
    by_key = {own.key: own, **siblings, "other": own}

    assert share_sibling_bests(own, strategies, by_key, db, k=2) == 2
    assert strategies[own.key].queue == [{"from": "s2"}, {"from": "s1"}]  # same FLOPs, then half (ties: order)
    assert share_sibling_bests(own, strategies, by_key, db, k=2) == 2  # the next nearest, not the same again
    assert [q["from"] for q in strategies[own.key].queue] == ["s2", "s1", "s3", "s0"]
    bests["s2"] = SimpleNamespace(params={"from": "s2", "better": True}, trace_json="[]")
    assert share_sibling_bests(own, strategies, by_key, db, k=2) == 2  # a sibling's new best comes first
    assert [q["from"] for q in strategies[own.key].queue[-2:]] == ["s2", "s4"]
    bests["s4"] = SimpleNamespace(params={"from": "s4"}, trace_json=None)  # a baseline record: not a schedule
    assert share_sibling_bests(own, strategies, by_key, db, k=2) == 0


def test_a_matmul_starts_from_micro_kernel_shaped_schedules():
    """A float32 matmul's first candidates are the micro-kernel seeds (each queued once); a softmax, a CUDA task
    and a budget of 0 get none."""
    import optuna

    from autosched._tvm import llvm_vector_bits
    from autosched.scheduler.model_tuning import start_from_microkernels
    from autosched.search.optuna_strategy import OptunaStrategy
    from autosched.spaces.microkernel import microkernel_params
    from autosched.spaces.trace_space import TraceSearchSpace
    from autosched.tasks import make_target

    def strategy(task):
        space = TraceSearchSpace(task.mod, task.target, settings_for(task.target))
        return OptunaStrategy(space, task.key, optuna.storages.InMemoryStorage(), "random", 0)

    cpu, gpu = make_target("llvm", 1), make_target("cuda")
    matmul = op_task("matmul", (96, 128, 256), cpu, settings_for(cpu).version)
    search = strategy(matmul)
    assert start_from_microkernels(matmul, search, k=0) == 0
    n = start_from_microkernels(matmul, search, k=3)
    assert 1 <= n <= 3
    assert start_from_microkernels(matmul, search, k=3) == 0  # already queued
    seeds = microkernel_params(search.space, llvm_vector_bits(cpu), 3)
    assert [c.params for c in search.ask(n)] == seeds[:n]
    softmax = op_task("softmax", (8, 64), cpu, settings_for(cpu).version)
    assert start_from_microkernels(softmax, strategy(softmax), k=4) == 0
    on_gpu = op_task("matmul", (96, 128, 256), gpu, settings_for(gpu).version)
    assert start_from_microkernels(on_gpu, strategy(on_gpu), k=4) == 0


def test_a_task_s_defaults_include_the_refitted_best_of_a_similar_task_in_the_database(cpu_target):
    """Another model's dense layer of other sizes, tuned: its best schedule, refitted to this task's sizes, is
    measured with this task's defaults; a task of another operator, or of the same model (its search shares its
    bests), gives nothing."""
    from autosched.scheduler.model_tuning import _stem, transferred_candidates
    from autosched.tune import to_record

    version = settings_for(cpu_target).version
    mine, donor = (op_task("dense", shape, cpu_target, version) for shape in ((64, 128, 256), (96, 256, 384)))
    other_op = op_task("matmul", (32, 32, 32), cpu_target, version)
    assert _stem(mine.name) == _stem(donor.name) != _stem(other_op.name)
    db = MemoryDatabase()
    donor_space = TraceSearchSpace(donor.mod, cpu_target, settings_for(cpu_target))
    params, sch = donor_space.default_schedule()
    for task in (donor, other_op):
        db.commit_task(TaskRow(task.key, task.name, task.target_json, task.space_version, save_json(task.mod),
                               task.flops, task.info))
    cand = Candidate(donor.key, params, donor_space.effective_decisions(sch),
                     as_python(sch.trace.as_json(remove_postproc=False)), save_json(sch.mod))
    db.commit([to_record(donor, cand, MeasureResult(Status.OK, [1e-4]))])
    space = TraceSearchSpace(mine.mod, cpu_target, settings_for(cpu_target))
    (moved,) = transferred_candidates(mine, space, db)
    assert moved.task_key == mine.key and moved.params == space.transfer_params(sch.trace)
    space.apply(moved.params)  # legal at this task's sizes
    assert transferred_candidates(other_op, TraceSearchSpace(other_op.mod, cpu_target, settings_for(cpu_target)),
                                  db) == []
    assert transferred_candidates(mine, space, db, siblings=frozenset({donor.key})) == []  # the same model's task
