"""Text datasets in PaddleOCR's label format, which PP-OCR users already have.

A ``data.yaml`` names one label file per split; image paths in them are relative to ``path``
(PaddleOCR's ``data_dir``; default: the YAML's folder)::

    path: datasets/icdar2015
    train: train_label.txt
    val: val_label.txt

Each line of a label file is a picture and its text lines, separated by a tab::

    images/img_1.jpg<TAB>[{"transcription": "Genaxis", "points": [[377, 117], [463, 117], [465, 130], [378, 130]]}]

``points`` is the line's polygon in the picture's pixels (four or more corners); a transcription
of ``###`` or ``*`` marks a region not to score (unreadable text: a detection mostly inside it is
neither right nor wrong). A line that cannot be read, or names a missing picture, is skipped with a
warning that names it; a split with nothing usable is an error.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ...data.errors import DataConfigError, EmptySplitError
from ...data.split_index import DataProblem

log = logging.getLogger(__name__)

IGNORED_TEXTS = ("###", "*")
"""Transcriptions that mark a region not to score (PaddleOCR's ``ignore_tags``)."""

NAMES = {0: "text"}

_EXAMPLE = ("path: datasets/icdar2015   # picture paths in the label files are relative to it\n"
            "train: train_label.txt     # per line: picture path, a tab, then\n"
            "val: val_label.txt         # [{\"transcription\": \"...\", \"points\": [[x, y], ...]}, ...]")


@dataclass(frozen=True)
class TextBox:
    """One labelled text line: ``points`` ``float32 [k, 2]`` in picture pixels, its text, and
    whether it is a region not to score."""

    points: np.ndarray
    text: str
    ignore: bool


@dataclass(frozen=True)
class OcrData:
    """A parsed description: the pictures' root and one label file per split."""

    root: Path
    splits: dict[str, Path]
    source: str
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))

    @property
    def nc(self) -> int:
        return 1


@dataclass(frozen=True)
class OcrSplit:
    """One checked split: pictures that exist, each with its text lines (possibly none)."""

    name: str
    images: list[Path]
    lines: list[list[TextBox]]
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))

    def __len__(self) -> int:
        return len(self.images)


def load_ocr_data(data: str | os.PathLike[str] | Mapping[str, Any] | OcrData, *,
                  bundled: str = "shapes-ocr") -> OcrData:
    """A text dataset's ``data.yaml`` (a path, a folder holding one, a dict) -> ``OcrData``.

    Raises:
        DataConfigError: a missing or unreadable file, or a split that is not a label file name.
    """
    if isinstance(data, OcrData):
        return data
    if isinstance(data, Mapping):
        return _from_mapping(data, Path.cwd(), "data dict")
    if not isinstance(data, str | os.PathLike):
        raise DataConfigError(f"data={data!r} is not a text dataset; pass a data.yaml path, a dict, or the bundled "
                              f"{bundled!r}")
    path = Path(data).expanduser()
    if path.is_dir():
        path = path / "data.yaml"
    if not path.is_file():
        raise DataConfigError(f"data={os.fspath(data)!r}: no such file; pass a data.yaml such as\n{_EXAMPLE}\n"
                              f"or the bundled {bundled!r}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise DataConfigError(f"{path}: cannot read it as YAML ({err}); e.g.\n{_EXAMPLE}") from err
    if not isinstance(raw, Mapping):
        raise DataConfigError(f"{path}: expected key: value pairs; e.g.\n{_EXAMPLE}")
    return _from_mapping(raw, Path(os.path.abspath(path.parent)), os.fspath(path))


def _from_mapping(raw: Mapping[str, Any], base: Path, source: str) -> OcrData:
    root_value = raw.get("path")
    root = base if root_value in (None, "") else Path(os.path.abspath(base / Path(str(root_value)).expanduser()))
    splits = {}
    for split in ("train", "val", "test"):
        value = raw.get(split)
        if value in (None, ""):
            continue
        if not isinstance(value, str | os.PathLike):
            raise DataConfigError(f"{source}: {split}={value!r} must be the name of a label file; e.g.\n{_EXAMPLE}")
        splits[split] = root / Path(value)
    if not splits:
        raise DataConfigError(f"{source}: no split (train, val or test) names a label file; e.g.\n{_EXAMPLE}")
    return OcrData(root, splits, source)


def parse_label_line(line: str) -> tuple[str, list[TextBox]]:
    """One label line -> (the picture's path as written, its text lines).

    Raises:
        ValueError: saying what is wrong with the line.
    """
    path, sep, annotations = line.partition("\t")
    if not sep or not path.strip():
        raise ValueError("expected a picture path, a tab, then the JSON list of its text lines")
    try:
        entries = json.loads(annotations)
    except json.JSONDecodeError as err:
        raise ValueError(f"the annotations are not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(entries, list):
        raise ValueError("the annotations must be a JSON list of {\"transcription\", \"points\"} objects")
    boxes = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict) or "points" not in entry or "transcription" not in entry:
            raise ValueError(f"text line {k} needs both \"transcription\" and \"points\"")
        try:
            points = np.asarray(entry["points"], dtype=np.float32)
        except (TypeError, ValueError):
            raise ValueError(f"text line {k}: points must be [[x, y], ...] numbers") from None
        if points.ndim != 2 or points.shape[1] != 2 or len(points) < 3 or not np.isfinite(points).all():
            raise ValueError(f"text line {k}: points must be three or more [x, y] pairs, got shape "
                             f"{list(points.shape)}")
        text = str(entry["transcription"])
        boxes.append(TextBox(points, text, text in IGNORED_TEXTS))
    return path.strip(), boxes


def read_ocr_split(data: OcrData, split: str) -> OcrSplit:
    """Read and check one split's label file (problems logged, then a summary).

    Raises:
        DataConfigError: the description has no such split.
        EmptySplitError: the label file is missing, or no line is usable.
    """
    if split not in data.splits:
        raise DataConfigError(f"{data.source}: no {split!r} split (it has {', '.join(data.splits)})")
    label_file = data.splits[split]
    if not label_file.is_file():
        raise EmptySplitError(f"{split}: the label file {label_file} does not exist (from {data.source})")
    images, lines, problems = [], [], []
    for number, line in enumerate(label_file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            name, boxes = parse_label_line(line)
        except ValueError as err:
            problems.append(DataProblem(label_file, f"line {number}: {err}"))
            continue
        image = data.root / name
        if not image.is_file():
            problems.append(DataProblem(image, f"named on line {number} of {label_file}, but there is no such file"))
            continue
        images.append(image)
        lines.append(boxes)
    for problem in problems:
        log.warning("%s: skipped %s: %s", split, problem.path, problem.reason)
    found = OcrSplit(split, images, lines, problems, data.source)
    log.info("%s: %d pictures with %d text lines, %d problems%s", split, len(found), sum(map(len, lines)),
             len(problems), " (see above)" if problems else "")
    if not images:
        raise EmptySplitError(f"{split}: no usable line in {label_file} (from {data.source})"
                              + (f": all {len(problems)} were skipped (reasons above)" if problems else ""))
    return found
