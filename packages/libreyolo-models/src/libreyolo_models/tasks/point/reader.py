"""Read and check a point split: images with object centroids, from YOLO label files.

The dataset description is a detection ``data.yaml`` (``path``, ``train``, ``val``, ``names``):
images in ``images/``, one label ``.txt`` per image in ``labels/`` beside it. A label row is

- ``class x y``: a point (normalised to the image, 0..1), or
- ``class cx cy w h``: a YOLO box, whose centre is the point (so every detection dataset is a
  point dataset).

The rules follow the detection reader's: a malformed row, a class id outside ``0 .. nc-1`` or a
coordinate outside [0, 1] by more than ``COORD_TOLERANCE`` skips the whole file (its image is not
trained on: dropping the row would teach "background" where an object is); duplicate points are
dropped with a note; no label file is a background image. Every problem is logged with the file's
path; a split with nothing usable is an error.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...data import image_check
from ...data.data_config import DataConfig
from ...data.errors import EmptySplitError
from ...data.label_check import COORD_TOLERANCE
from ...data.split_index import DataProblem
from ...data.yolo_reader import label_path_for, list_split_images

log = logging.getLogger(__name__)

_EMPTY = np.zeros((0, 3), dtype=np.float32)


@dataclass(frozen=True)
class PointSplit:
    """One checked point split.

    Attributes:
        name: split name; images: paths in a stable order.
        points: per image, ``float32 [n, 3]`` rows (class, x, y), normalised to the original image.
        sizes: per image, ``(height, width)`` after EXIF orientation.
        names: class id -> name; problems: files skipped or fixed; source: the data.yaml.
    """

    name: str
    images: list[Path]
    points: list[np.ndarray]
    sizes: list[tuple[int, int]]
    names: dict[int, str]
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""

    def __len__(self) -> int:
        return len(self.images)

    @property
    def nc(self) -> int:
        return len(self.names)

    def n_points(self) -> int:
        return int(sum(len(p) for p in self.points))


@dataclass(frozen=True)
class PointLabels:
    """What one label file holds: ``rows`` (class, x, y), or why it must be skipped, and notes."""

    rows: np.ndarray
    error: str | None = None
    notes: tuple[str, ...] = ()


def parse_point_text(text: str, nc: int, source: str) -> PointLabels:
    """The checked points of a label file's text (``class x y`` or ``class cx cy w h`` rows)."""
    rows: list[tuple[float, float, float]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) not in (3, 5):
            return PointLabels(_EMPTY, error=f"line {line_no}: {len(fields)} values {line.strip()!r}; expected 3 "
                                             "(class x y) or 5 (class cx cy w h)")
        try:
            values = [float(f) for f in fields]
        except ValueError:
            return PointLabels(_EMPTY, error=f"line {line_no}: {line.strip()!r} holds a value that is not a number")
        if not all(math.isfinite(v) for v in values) or values[0] != int(values[0]):
            return PointLabels(_EMPTY, error=f"line {line_no}: {line.strip()!r}: the class must be a whole number "
                                             "and every value finite")
        cls, x, y = int(values[0]), values[1], values[2]
        if not 0 <= cls < nc:
            return PointLabels(_EMPTY, error=f"line {line_no}: class id {cls} is out of range; valid ids are "
                                             f"0..{nc - 1} (nc={nc} from {source})")
        if not all(-COORD_TOLERANCE <= v <= 1 + COORD_TOLERANCE for v in values[1:]):
            return PointLabels(_EMPTY, error=f"line {line_no}: coordinates {' '.join(fields[1:])} are outside [0, 1]; "
                                             "labels are normalised (divide pixels by the image width/height)")
        rows.append((float(cls), min(max(x, 0.0), 1.0), min(max(y, 0.0), 1.0)))
    if not rows:
        return PointLabels(_EMPTY)
    array = np.asarray(rows, dtype=np.float32)
    _, first = np.unique(array, axis=0, return_index=True)
    if len(first) < len(array):
        dropped = len(array) - len(first)
        return PointLabels(array[np.sort(first)], notes=(f"{dropped} duplicate point{'s' if dropped > 1 else ''} "
                                                         "dropped",))
    return PointLabels(array)


def read_point_file(path: Path, nc: int, source: str) -> PointLabels:
    """A label file's checked points; no file is a background image (no points)."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        return PointLabels(_EMPTY)
    except (OSError, UnicodeDecodeError) as err:
        return PointLabels(_EMPTY, error=f"cannot read label file {path}: {err}")
    return parse_point_text(text, nc, source)


def read_point_split(config: DataConfig, split: str) -> PointSplit:
    """Check every image of ``split`` and read its points; log the problems and a summary.

    Raises:
        DataConfigError: the description lacks the split.
        EmptySplitError: an entry does not exist, or no image is usable.
    """
    entries = config.split_paths(split)
    for entry in entries:
        if not entry.exists():
            raise EmptySplitError(f"{split}: {entry} does not exist (from {split!r} in {config.source}); fix the path, "
                                  f"which is relative to the dataset root {config.root}")
    images, problems = list_split_images(entries, config.root, split, config.source)

    def check(image: Path) -> tuple[image_check.ImageCheck, PointLabels | None]:
        verdict = image_check.check_image(image)
        if verdict.error is not None:
            return verdict, None
        return verdict, read_point_file(label_path_for(image), config.nc, config.source)

    with ThreadPoolExecutor() as pool:
        checks = list(pool.map(check, images))
    kept, points, sizes = [], [], []
    for image, (verdict, labels) in zip(images, checks):
        if verdict.error is not None or verdict.size is None or labels is None:
            problems.append(DataProblem(image, verdict.error or "no readable size"))
            continue
        if labels.error is not None:
            problems.append(DataProblem(image, f"{label_path_for(image)}: {labels.error}"))
            continue
        problems += [DataProblem(image, note, skipped=False) for note in labels.notes]
        kept.append(image)
        points.append(labels.rows)
        sizes.append(verdict.size)
    found = PointSplit(split, kept, points, sizes, dict(config.names), problems, config.source)
    for problem in problems:
        log.warning("%s: %s %s: %s", split, "skipped" if problem.skipped else "used", problem.path, problem.reason)
    skipped = sum(p.skipped for p in problems)
    log.info("%s: %d images, %d points, %d skipped%s", split, len(found), found.n_points(), skipped,
             " (see above)" if skipped else "")
    if not found.images:
        raise EmptySplitError(f"{split}: no usable image in {', '.join(str(e) for e in entries)} (from {config.source})"
                              + (f": all {len(problems)} were skipped (reasons above)" if problems else ""))
    return found
