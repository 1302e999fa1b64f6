"""Which task each bundled dataset belongs to, so that ``data=`` naming another task's set gets
one line saying whose set it is and which one this model uses, instead of "no such file".

A literal table (a test checks it against every task's own names): the tasks' readers live in
their own folders and none should import another's to learn its names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..data.errors import DataConfigError

BUNDLED_SETS: dict[str, str] = {
    "shapes": "detect", "shapes-cls": "classify", "shapes-seg": "semantic", "shapes-inst": "segment",
    "shapes-pose": "pose", "shapes-point": "point", "shapes-restore": "restore", "shapes-matte": "matte",
    "shapes-ocr": "ocr", "shapes-depth": "depth",
}
"""Bundled set -> the task whose data it is (also accepted with a ``.yaml`` suffix)."""

WHAT_IT_HOLDS: dict[str, str] = {
    "detect": "boxes", "classify": "one class per picture", "semantic": "class masks",
    "segment": "boxes with instance masks", "pose": "boxes with keypoints", "point": "object centres",
    "restore": "degraded pictures with clean targets", "matte": "pictures with alpha mattes",
    "ocr": "printed words with their text", "depth": "pictures with metric depth maps",
}


def bundled_owner(data: Any) -> str | None:
    """The task whose bundled set ``data`` names; None for anything else (a real path included)."""
    if not isinstance(data, str | os.PathLike):
        return None
    name = os.fspath(data)
    name = name.removesuffix(".yaml")
    if name not in BUNDLED_SETS or Path(data).exists():
        return None
    return BUNDLED_SETS[name]


def refuse_foreign_bundle(data: Any, task: str, *, accepts: tuple[str, ...] = (), purpose: str = "") -> None:
    """Raise when ``data`` names the bundled set of a task other than ``task`` (and ``accepts``).

    Raises:
        DataConfigError: naming the set's task, what it holds, and the set ``task`` models use.
    """
    owner = bundled_owner(data)
    if owner is None or owner == task or owner in accepts:
        return
    own = next((name for name, holder in BUNDLED_SETS.items() if holder == task), None) or next(
        (name for name, holder in BUNDLED_SETS.items() if holder in accepts), None)
    kind = f"{'an' if task[0] in 'aeio' else 'a'} {task}"  # "an ocr model", "a depth model"
    use = (f"use data={own!r} or {kind} dataset" if own is not None
           else f"pass {kind} dataset (a data.yaml path, a folder or a dict)")
    raise DataConfigError(f"data={os.fspath(data)!r} is the bundled {owner} set ({WHAT_IT_HOLDS[owner]}); "
                          f"{purpose or f'{kind} model'} cannot use it: {use}")


def resolve_bundled(data: Any, task: str, names: tuple[str, ...], ensure: Callable[[], Path], *,
                    accepts: tuple[str, ...] = ()) -> Any:
    """``data``, or the ``data.yaml`` of ``task``'s own bundled set (generated on first use by
    ``ensure``) when it names one of ``names`` and no such path exists; another task's set is
    refused (``refuse_foreign_bundle``)."""
    refuse_foreign_bundle(data, task, accepts=accepts)
    if isinstance(data, str | os.PathLike) and not Path(data).exists() and os.fspath(data) in names:
        return ensure()
    return data
