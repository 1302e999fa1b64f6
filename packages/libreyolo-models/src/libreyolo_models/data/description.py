"""A dataset description as the newer tasks take it (restore, matte, ocr, depth): a ``data.yaml``
path, a folder holding one, or a dict; read safely, with one error naming the file and showing
the task's own example when it is missing or unreadable. Each task parses the mapping itself."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import DataConfigError


def read_description(data: Any, *, example: str, bundled: str, kind: str) -> tuple[Mapping[str, Any], Path, str]:
    """``data`` -> (its key: value pairs, the folder relative paths start from, where it came from).

    ``example``: a data.yaml of the task, shown in errors; ``bundled``: its bundled set's name;
    ``kind``: what the task calls its data ("a restoration dataset").

    Raises:
        DataConfigError: not a path or dict, no such file, invalid YAML, or not a mapping.
    """
    if isinstance(data, Mapping):
        return data, Path.cwd(), "data dict"
    if not isinstance(data, str | os.PathLike):
        raise DataConfigError(f"data={data!r} is not {kind}; pass a data.yaml path, a dict, or the bundled "
                              f"{bundled!r}")
    path = Path(data).expanduser()
    if path.is_dir():
        path = path / "data.yaml"
    if not path.is_file():
        raise DataConfigError(f"data={os.fspath(data)!r}: no such file; pass a data.yaml such as\n{example}\n"
                              f"or the bundled {bundled!r}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise DataConfigError(f"{path}: cannot read it as YAML ({err}); e.g.\n{example}") from err
    if not isinstance(raw, Mapping):
        raise DataConfigError(f"{path}: expected key: value pairs; e.g.\n{example}")
    return raw, Path(os.path.abspath(path.parent)), os.fspath(path)


def description_root(raw: Mapping[str, Any], base: Path) -> Path:
    """The dataset's root: its ``path`` key (relative to ``base``), or ``base`` without one."""
    value = raw.get("path")
    return base if value in (None, "") else Path(os.path.abspath(base / Path(str(value)).expanduser()))
