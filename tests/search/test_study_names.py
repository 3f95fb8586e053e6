"""A task's study is named for people (what optuna-dashboard's study list shows: names only) and found by its key:
new studies carry the task's name, pattern, shapes and target; studies of older databases (``autosched-<key>``)
are resumed, not duplicated."""

from __future__ import annotations

import optuna
import pytest

from autosched.records import MeasureResult, Status
from autosched.search.optuna_strategy import OptunaStrategy
from autosched.search.study import load_task_study, parse_study_name, study_name, task_studies
from autosched.tasks import describe_shapes, describe_target


def _tell(strategy: OptunaStrategy, n: int) -> None:
    for i in range(n):
        cands = strategy.ask(1)
        strategy.tell(cands, [MeasureResult(Status.OK, [1e-3 * (1 + i)])] * len(cands))


def test_a_new_study_is_named_after_its_task(matmul_task, matmul_space):
    about = matmul_task.about()
    assert about == {"task": "matmul_32x32x32", "pattern": "", "shape": "32x32, 32x32 -> 32x32 float32",
                     "target": describe_target(matmul_task.target_json)}
    assert about["target"].startswith("llvm ") and about["target"].endswith(" x1")
    storage = optuna.storages.InMemoryStorage()
    s = OptunaStrategy(matmul_space, matmul_task.key, storage, "tpe", 0, about=about)
    name = s.study.study_name
    assert name == f"autosched-{matmul_task.key} matmul_32x32x32 · 32x32, 32x32 -> 32x32 float32 · {about['target']}"
    assert parse_study_name(name) == (matmul_task.key, None)
    assert s.study.user_attrs == {"task_key": matmul_task.key, **{k: v for k, v in about.items() if v}}
    _tell(s, 2)
    # another model's task of the same key (another name) goes on in the same study
    again = OptunaStrategy(matmul_space, matmul_task.key, storage, "tpe", 0, about={**about, "task": "other"})
    assert again.study.study_name == name and len(again.study.get_trials()) == 2
    assert again.study.user_attrs["task"] == "matmul_32x32x32"
    assert load_task_study(storage, matmul_task.key).study_name == name


def test_a_study_named_before_labels_is_resumed_and_labelled(matmul_task, matmul_space):
    storage = optuna.storages.InMemoryStorage()
    old = OptunaStrategy(matmul_space, matmul_task.key, storage, "tpe", 0)  # as autosched named studies before
    assert old.study.study_name == f"autosched-{matmul_task.key}"
    _tell(old, 3)
    s = OptunaStrategy(matmul_space, matmul_task.key, storage, "tpe", 0, about=matmul_task.about())
    assert s.study.study_name == f"autosched-{matmul_task.key}" and len(s.study.get_trials()) == 3
    assert len(storage.get_all_studies()) == 1
    assert s.study.user_attrs["task"] == "matmul_32x32x32"  # its page in the dashboard says which task it is


def test_names_parse_back_to_their_key():
    assert parse_study_name("autosched-ab12") == ("ab12", None)
    assert parse_study_name("autosched-ab12@7designs") == ("ab12", 7)
    assert parse_study_name(study_name("ab12", {"task": "t", "target": "llvm x1"}, 7)) == ("ab12", 7)
    assert study_name("ab12", {"task": "t", "pattern": "", "target": "llvm x1"}) == "autosched-ab12 t · llvm x1"
    assert parse_study_name("my-study") is None and parse_study_name("autosched-") is None
    storage = optuna.storages.InMemoryStorage()
    for name in ("autosched-ab", "autosched-abc x", "autosched-ab@3designs y", "other"):
        optuna.create_study(study_name=name, storage=storage)
    found = {k: [s.study_name for s in v] for k, v in task_studies(storage).items()}
    assert found == {"ab": ["autosched-ab", "autosched-ab@3designs y"], "abc": ["autosched-abc x"]}
    assert load_task_study(storage, "ab", 3).study_name == "autosched-ab@3designs y"
    with pytest.raises(KeyError):
        load_task_study(storage, "a")


def test_shapes_in_a_few_words():
    assert describe_shapes([((1, 768), "float32"), ((768, 768), "float32"), ((1, 768), "float32")]) == \
        "1x768, 768x768 -> 1x768 float32"
    assert describe_shapes([((1, 8), "int64"), ((8, 4), "float16"), ((1, 8, 4), "float16")]) == \
        "1x8 int64, 8x4 float16 -> 1x8x4 float16"
    assert len(describe_shapes([((2,) * 30, "float32")] * 20)) == 160
    assert describe_target('{"kind": "cuda", "arch": "sm_90"}') == "cuda sm_90"
