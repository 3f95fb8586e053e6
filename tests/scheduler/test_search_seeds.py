"""What a task's search starts from: its best schedules at another thread count or on another CPU, the refitted
bests of tasks like it, its siblings' bests, and micro-kernel-shaped settings."""

from __future__ import annotations

from autosched.db import MemoryDatabase
from autosched.records import MeasureResult, Status
from autosched.scheduler.search_seeds import share_sibling_bests
from autosched.spaces.settings import settings_for
from autosched.tasks import op_task


def test_a_task_tuned_at_another_thread_count_starts_from_its_best_schedules():
    """A model tuned at 2 threads, then at 1 in the same database: each task's first candidates are the best
    schedules of its 2-thread twin (valid at any thread count), best first; without such a twin, none."""
    import optuna

    from autosched.db import TaskRow
    from autosched.scheduler.search_seeds import start_from_other_thread_counts
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
    from autosched.scheduler.search_seeds import start_from_other_thread_counts
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


def test_a_task_starts_from_the_refitted_best_schedules_of_tasks_like_it():
    """A matmul of 40 rows searched after matmuls of 64 and 512 rows (same designs, other sizes): the best
    schedule of the nearest in FLOPs (64 rows), refitted, is its first candidate; a softmax (no design in common)
    and a budget of 0 queue nothing."""
    import math

    import optuna

    from autosched.apply import schedule_from_record
    from autosched.db import TaskRow
    from autosched.scheduler.search_seeds import start_from_relatives
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

    def __init__(self, space_signature: str = "conv") -> None:
        self.space_signature = space_signature
        self.queue: list[dict] = []

    def fitted(self, params: dict) -> dict:
        return params

    def propose(self, params: dict) -> bool:
        if params in self.queue:
            return False
        self.queue.append(params)
        return True


def test_sibling_bests_come_nearest_first_and_a_few_a_round(cpu_target):
    """Every same-knob task's best, each round, would fill a model's rounds (twenty convolutions): a round gets
    at most ``k`` new ones, from the siblings nearest in FLOPs, and a best already queued is not queued again."""
    from types import SimpleNamespace

    own = op_task("matmul", (16, 16, 16), cpu_target, settings_for(cpu_target).version)
    siblings = {f"s{i}": SimpleNamespace(flops=own.flops * 2.0 ** (i - 2), target_json="t") for i in range(5)}
    bests = {key: SimpleNamespace(params={"from": key}, trace_json="[]") for key in siblings}
    db = SimpleNamespace(best=lambda key, target_json: bests.get(key))
    strategies = {own.key: SiblingStrategy(), **{key: SiblingStrategy() for key in siblings},
                  "other": SiblingStrategy("dense")}  # another space: never a sibling
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
    from autosched.scheduler.search_seeds import start_from_microkernels
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
