"""Tasks as declarations: one literal table, complete without import side effects."""

from __future__ import annotations

from ..config import suggest
from ..errors import ConfigError
from .base import EvalSettings, Prepared, Task, TaskMetrics
from .classify.task import ClassifyOptions, ClassifyTask
from .detect.task import DetectOptions, DetectTask
from .semantic.task import SemanticTask

TASKS: dict[str, Task] = {task.name: task for task in (DetectTask(), SemanticTask(), ClassifyTask())}


def get_task(name: str) -> Task:
    """The task called ``name``; a ConfigError listing the known tasks otherwise."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(sorted(TASKS))}" + suggest(name, TASKS))
    return TASKS[name]


__all__ = ["TASKS", "ClassifyOptions", "ClassifyTask", "DetectOptions", "DetectTask", "EvalSettings", "Prepared",
           "SemanticTask", "Task", "TaskMetrics", "get_task"]
