"""The family registry: one literal table of built-in families, plus a public hook for others.

``BUILTIN`` is complete without import side effects; a test checks that every folder under
``families/`` is in it and every entry has a folder. Families defined outside this package (a
plugin, a test's toy family) join through ``register_family`` and leave through
``unregister_family``; nothing registers itself on import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..config import suggest
from ..contract.spec import TASK_SUFFIXES, FamilySpec
from ..errors import ConfigError, UnknownFamilyError
from ..families.birefnet.spec import SPEC as BIREFNET
from ..families.convnext.spec import SPEC as CONVNEXT
from ..families.damoyolo.spec import SPEC as DAMOYOLO
from ..families.deim.spec import SPEC as DEIM
from ..families.deimv2.spec import SPEC as DEIMV2
from ..families.depthanything.spec import SPEC as DEPTHANYTHING
from ..families.dfine.spec import SPEC as DFINE
from ..families.ec.spec import SPEC as EC
from ..families.efficientnetv2.spec import SPEC as EFFICIENTNETV2
from ..families.fomo.spec import SPEC as FOMO
from ..families.mobilenetv4.spec import SPEC as MOBILENETV4
from ..families.nafnet.spec import SPEC as NAFNET
from ..families.picodet.spec import SPEC as PICODET
from ..families.ppocr.spec import SPEC as PPOCR
from ..families.resnet.spec import SPEC as RESNET
from ..families.rfdetr.spec import SPEC as RFDETR
from ..families.rtdetr.spec import SPEC as RTDETR
from ..families.rtdetrv2.spec import SPEC as RTDETRV2
from ..families.rtdetrv4.spec import SPEC as RTDETRV4
from ..families.rtmdet.spec import SPEC as RTMDET
from ..families.sam.spec import SPEC as SAM
from ..families.segformer.spec import SPEC as SEGFORMER
from ..families.yolo7.spec import SPEC as YOLO7
from ..families.yolo9.spec import SPEC as YOLO9
from ..families.yolo9_e2e.spec import SPEC as YOLO9_E2E
from ..families.yolonas.spec import SPEC as YOLONAS
from ..families.yolox.spec import SPEC as YOLOX

BUILTIN: dict[str, FamilySpec] = {spec.name: spec for spec in (YOLO9, YOLOX, RTMDET, RTDETR, SEGFORMER, RESNET,
                                                                EFFICIENTNETV2, CONVNEXT, MOBILENETV4, YOLO9_E2E,
                                                                DAMOYOLO, YOLO7, RFDETR, EC, DFINE, DEIM,
                                                                RTDETRV4, RTDETRV2, DEIMV2, YOLONAS, PICODET,
                                                                FOMO, NAFNET, DEPTHANYTHING, SAM, PPOCR, BIREFNET)}

_extra: dict[str, FamilySpec] = {}


def families() -> dict[str, FamilySpec]:
    """Every known family by name: the built-in table, then registered ones."""
    return {**BUILTIN, **_extra}


def register_family(spec: FamilySpec) -> FamilySpec:
    """Make a family defined outside this package known to ``LibreYOLO``, the CLI and the trainer.

    Raises:
        ConfigError: the name or weight prefix is taken by another family.
    """
    for other in families().values():
        if other.name == spec.name and other is not spec:
            raise ConfigError(f"a family named {spec.name!r} is already registered; pick another name")
        if other.weight_prefix.lower() == spec.weight_prefix.lower() and other.name != spec.name:
            raise ConfigError(f"weight prefix {spec.weight_prefix!r} is taken by family {other.name!r}")
    _extra[spec.name] = spec
    return spec


def unregister_family(name: str) -> None:
    """Forget a registered family (built-ins cannot be removed)."""
    if name in BUILTIN:
        raise ConfigError(f"{name!r} is a built-in family and cannot be unregistered")
    _extra.pop(name, None)


def get_family(name: str) -> FamilySpec:
    table = families()
    if name not in table:
        raise UnknownFamilyError(f"unknown model family {name!r}; known: {', '.join(sorted(table))}"
                                 + suggest(name, table))
    return table[name]


@dataclass(frozen=True)
class ParsedName:
    """``LibreYOLO9t-cls.pt`` -> family spec, size ``t``, task ``classify``, suffix ``.pt``; a name
    without a task suffix (``LibreSegFormerb0.pt``) means the family's default task."""

    family: FamilySpec
    size: str
    task: str
    suffix: str
    named_task: bool = True
    """Whether the name carries a task suffix (``-pose``); without one ``task`` is the default
    task, which a ``task=`` argument may override."""


def parse_model_name(name: str | Path) -> ParsedName:
    """Read family, size and task from a weights or architecture file name.

    Raises:
        UnknownFamilyError: no family prefix matches, or the size or task is not one the family has.
    """
    stem, suffix = Path(name).stem, Path(name).suffix.lower()
    table = families()
    for spec in sorted(table.values(), key=lambda s: -len(s.weight_prefix)):
        prefix = spec.weight_prefix
        if not stem.lower().startswith(prefix.lower()):
            continue
        match = re.fullmatch(r"([A-Za-z0-9]+?)(-[a-z]+)?", stem[len(prefix):])
        if not match:
            continue
        size, task_suffix = match.group(1), match.group(2) or ""
        if size not in spec.sizes:
            raise UnknownFamilyError(f"{Path(name).name!r}: {spec.display_name} has no size {size!r}; "
                                     f"sizes: {', '.join(spec.sizes)}" + suggest(size, spec.sizes))
        # No suffix names the family's default task (detect for YOLO, semantic for SegFormer,
        # classify for the classifiers).
        task = spec.default_task if not task_suffix else {v: k for k, v in TASK_SUFFIXES.items()}.get(task_suffix)
        if task is None or task not in spec.tasks:
            raise UnknownFamilyError(f"{Path(name).name!r}: {spec.display_name} has no task for suffix "
                                     f"{task_suffix!r}; tasks: {', '.join(spec.tasks)}")
        return ParsedName(spec, size, task, suffix, named_task=bool(task_suffix))
    examples = ", ".join(s.weight_name(s.default_size) for s in table.values())
    raise UnknownFamilyError(f"cannot tell the model family from {Path(name).name!r}; expected a name like "
                             f"{examples} (weights) or the same with .yaml (untrained architecture)")


def has_family_prefix(name: str) -> bool:
    """Whether ``name`` starts like one of the known families' weight files."""
    return any(name.lower().startswith(s.weight_prefix.lower()) for s in families().values())
