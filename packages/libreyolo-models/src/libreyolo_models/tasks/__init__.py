"""Tasks as declarations: one literal table of built-in tasks, complete without import side
effects, plus a public hook for tasks defined elsewhere (a plugin, a test's toy task)."""

from __future__ import annotations

from ..config import suggest
from ..errors import ConfigError
from .base import EvalSettings, Prepared, Task, TaskMetrics
from .classify.task import ClassifyOptions, ClassifyTask
from .depth.task import DepthTask
from .detect.task import DetectOptions, DetectTask
from .matte.task import MatteTask
from .ocr.task import OcrTask
from .point.task import PointOptions, PointTask
from .pose.task import PoseTask
from .prompt_segment.task import PromptSegmentTask
from .restore.task import RestoreTask
from .results import RESULTS_FIELDS
from .segment.task import SegmentTask
from .semantic.task import SemanticTask

TASKS: dict[str, Task] = {task.name: task for task in (DetectTask(), SemanticTask(), ClassifyTask(), SegmentTask(),
                                                       PoseTask(), PointTask(), RestoreTask(), DepthTask(),
                                                       PromptSegmentTask(), OcrTask(), MatteTask())}
RESULTS_FIELDS.update(task.results_field for task in TASKS.values())

_extra: dict[str, Task] = {}


def tasks() -> dict[str, Task]:
    """Every known task by name: the built-in table, then registered ones."""
    return {**TASKS, **_extra}


def register_task(task: Task) -> Task:
    """Make a task defined outside this package known to families, the jobs and the CLI.

    Raises:
        ConfigError: another task already has its name.
    """
    held = tasks().get(task.name)
    if held is not None and held is not task:
        raise ConfigError(f"a task named {task.name!r} is already registered; pick another name")
    _extra[task.name] = task
    RESULTS_FIELDS.add(task.results_field)
    return task


def unregister_task(name: str) -> None:
    """Forget a registered task (built-ins cannot be removed)."""
    if name in TASKS:
        raise ConfigError(f"{name!r} is a built-in task and cannot be unregistered")
    _extra.pop(name, None)


def get_task(name: str) -> Task:
    """The task called ``name``; a ConfigError listing the known tasks otherwise."""
    table = tasks()
    if name not in table:
        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(sorted(table))}" + suggest(name, table))
    return table[name]


__all__ = ["TASKS", "ClassifyOptions", "ClassifyTask", "DepthTask", "DetectOptions", "DetectTask", "EvalSettings",
           "MatteTask", "OcrTask", "PointOptions", "PointTask", "PoseTask", "Prepared", "PromptSegmentTask",
           "RestoreTask", "SegmentTask", "SemanticTask", "Task", "TaskMetrics", "get_task", "register_task", "tasks",
           "unregister_task"]
