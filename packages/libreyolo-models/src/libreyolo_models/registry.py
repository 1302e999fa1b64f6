"""The family registry: one literal table, complete without import side effects.

A test checks that every folder under ``families/`` is in the table and every entry has a folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .config import suggest
from .errors import UnknownFamilyError
from .family_spec import TASK_SUFFIXES

if TYPE_CHECKING:
    from .model import LibreYOLO


def families() -> dict[str, type[LibreYOLO]]:
    """Family name -> user-facing class. Imported lazily so ``registry`` stays import-cheap."""
    from .families.yolo9.family import LibreYOLO9

    return {cls.spec.name: cls for cls in (LibreYOLO9,)}


def get_family(name: str) -> type[LibreYOLO]:
    table = families()
    if name not in table:
        raise UnknownFamilyError(f"unknown model family {name!r}; known: {', '.join(sorted(table))}"
                                 + suggest(name, table))
    return table[name]


@dataclass(frozen=True)
class ParsedName:
    """``LibreYOLO9t-cls.pt`` -> family class, size ``t``, task ``classify``, kind ``.pt``."""

    family: type[LibreYOLO]
    size: str
    task: str
    suffix: str


def parse_model_name(name: str | Path) -> ParsedName:
    """Read family, size and task from a weights or architecture file name.

    Raises:
        UnknownFamilyError: no family prefix matches, or the size or task is not one the family has.
    """
    stem, suffix = Path(name).stem, Path(name).suffix.lower()
    table = families()
    by_prefix = sorted(table.values(), key=lambda c: -len(c.spec.weight_prefix))
    for cls in by_prefix:
        prefix = cls.spec.weight_prefix
        if not stem.lower().startswith(prefix.lower()):
            continue
        rest = stem[len(prefix):]
        match = re.fullmatch(r"([A-Za-z0-9]+?)(-[a-z]+)?", rest)
        if not match:
            break
        size, task_suffix = match.group(1), match.group(2) or ""
        tasks = {v: k for k, v in TASK_SUFFIXES.items()}
        if size not in cls.spec.sizes:
            raise UnknownFamilyError(f"{Path(name).name!r}: {cls.spec.display_name} has no size {size!r}; "
                                     f"sizes: {', '.join(cls.spec.sizes)}" + suggest(size, cls.spec.sizes))
        task = tasks.get(task_suffix)
        if task is None or task not in cls.spec.tasks:
            raise UnknownFamilyError(f"{Path(name).name!r}: {cls.spec.display_name} has no task for suffix "
                                     f"{task_suffix!r}; tasks: {', '.join(cls.spec.tasks)}")
        return ParsedName(cls, size, task, suffix)
    examples = ", ".join(c.spec.weight_name(c.spec.default_size) for c in table.values())
    raise UnknownFamilyError(f"cannot tell the model family from {Path(name).name!r}; expected a name like "
                             f"{examples} (weights) or the same with .yaml (untrained architecture)")
