"""Whole models: import, graph rewrites and fusion groups, the task scheduler, and inference from the database."""

from __future__ import annotations

from autosched.models.build import CompiledModel, compile_model, compile_unscheduled, load_compiled
from autosched.models.frontends import InputSpec, Model, load_model, parse_input_shapes
from autosched.models.graph import GRAPH_PASSES, extract_tasks, fusion_groups, memory_plan, rewrite
from autosched.models.scheduler import TaskScheduler, TaskState
from autosched.models.tuning import ModelProgress, ModelTuneResult, tune_model_tasks

__all__ = [
    "GRAPH_PASSES", "CompiledModel", "InputSpec", "Model", "ModelProgress", "ModelTuneResult", "TaskScheduler",
    "TaskState", "compile_model", "compile_unscheduled", "extract_tasks", "fusion_groups", "load_compiled",
    "load_model", "memory_plan", "parse_input_shapes", "rewrite", "tune_model_tasks",
]
