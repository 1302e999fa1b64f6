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

ICDAR 2015's own layout reads as it is downloaded: a split given as ``{images: ch4_test_images,
labels: Challenge4_Test_Task1_GT}`` pairs ``img_1.jpg`` with ``gt_img_1.txt`` (or ``img_1.txt``),
whose lines are ``x1,y1,x2,y2,x3,y3,x4,y4,transcription`` (the text may hold commas; a UTF-8 BOM
is dropped).
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

from ...data.description import description_root, read_description
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
    splits: dict[str, Path | tuple[Path, Path]]  # a label file, or ICDAR's (images, labels) folders
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
    return _from_mapping(*read_description(data, example=_EXAMPLE, bundled=bundled, kind="a text dataset"))


def _from_mapping(raw: Mapping[str, Any], base: Path, source: str) -> OcrData:
    root = description_root(raw, base)
    splits: dict[str, Path | tuple[Path, Path]] = {}
    for split in ("train", "val", "test"):
        value = raw.get(split)
        if value in (None, ""):
            continue
        if isinstance(value, Mapping) and set(value) == {"images", "labels"}:
            splits[split] = (root / Path(str(value["images"])), root / Path(str(value["labels"])))
            continue
        if not isinstance(value, str | os.PathLike):
            raise DataConfigError(f"{source}: {split}={value!r} must be the name of a label file, or {{images: "
                                  f"<folder>, labels: <folder of ICDAR gt_*.txt>}}; e.g.\n{_EXAMPLE}")
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


def parse_icdar_line(line: str) -> TextBox:
    """One ICDAR 2015 ground-truth line ``x1,y1,...,x4,y4,transcription`` -> its ``TextBox``.

    Raises:
        ValueError: saying what is wrong with the line.
    """
    fields = line.lstrip("\ufeff").rstrip("\r\n").split(",", 8)
    if len(fields) < 9:
        raise ValueError("expected x1,y1,x2,y2,x3,y3,x4,y4,transcription")
    try:
        points = np.asarray([float(v) for v in fields[:8]], dtype=np.float32).reshape(4, 2)
    except ValueError:
        raise ValueError("the first eight fields must be numbers (four corners)") from None
    return TextBox(points, fields[8], fields[8] in IGNORED_TEXTS)


def _icdar_entries(images: Path, labels: Path) -> tuple[list[tuple[Path, list[TextBox]]], list[DataProblem]]:
    """ICDAR's folders -> (picture, its lines) for each picture with a ground-truth file."""
    from ...data.decode import IMAGE_SUFFIXES

    entries, problems = [], []
    for image in sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
        truth = next((f for f in (labels / f"gt_{image.stem}.txt", labels / f"{image.stem}.txt") if f.is_file()), None)
        if truth is None:
            problems.append(DataProblem(image, f"no gt_{image.stem}.txt or {image.stem}.txt in {labels}"))
            continue
        boxes = []
        for number, line in enumerate(truth.read_text(encoding="utf-8-sig").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                boxes.append(parse_icdar_line(line))
            except ValueError as err:
                problems.append(DataProblem(truth, f"line {number}: {err} (the line is left out)", skipped=False))
        entries.append((image, boxes))
    return entries, problems


def read_ocr_split(data: OcrData, split: str) -> OcrSplit:
    """Read and check one split's label file (problems logged, then a summary).

    Raises:
        DataConfigError: the description has no such split.
        EmptySplitError: the label file is missing, or no line is usable.
    """
    if split not in data.splits:
        raise DataConfigError(f"{data.source}: no {split!r} split (it has {', '.join(data.splits)})")
    entry = data.splits[split]
    if isinstance(entry, tuple):
        for folder, what in zip(entry, ("images", "labels"), strict=True):
            if not folder.is_dir():
                raise EmptySplitError(f"{split}: the {what} folder {folder} does not exist (from {data.source})")
        pairs, problems = _icdar_entries(*entry)
        return _checked(OcrSplit(split, [p for p, _ in pairs], [b for _, b in pairs], problems, data.source),
                        f"{entry[0]} and {entry[1]}")
    label_file = entry
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
    return _checked(OcrSplit(split, images, lines, problems, data.source), str(label_file))


def _checked(found: OcrSplit, where: str) -> OcrSplit:
    """Log a split's problems and summary; refuse it when nothing is usable."""
    for problem in found.problems:
        log.warning("%s: %s %s: %s", found.name, "skipped" if problem.skipped else "used", problem.path,
                    problem.reason)
    log.info("%s: %d pictures with %d text lines, %d problems%s", found.name, len(found),
             sum(map(len, found.lines)), len(found.problems), " (see above)" if found.problems else "")
    if not found.images:
        raise EmptySplitError(f"{found.name}: no usable picture in {where} (from {found.source})"
                              + (f": all {len(found.problems)} were skipped (reasons above)" if found.problems else ""))
    return found
