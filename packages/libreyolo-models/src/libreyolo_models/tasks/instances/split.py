"""An instance task's checked split: images, boxes, and per object its mask or keypoints.

The readers (``tasks.segment.reader``, ``tasks.pose.reader``) fill it; the pipelines read only
this. It follows ``data.split_index.SplitIndex`` (the boxes are detect's rows) with one list more,
``extras``: per image, one entry per box row, in the same order (segment: the masks' sources, each
with ``rasterize(h, w)``; pose: ``float32 [n, K, 3]`` keypoints). Scanning: the images of a YOLO
tree or list are checked in threads (``data.image_check``) and their label files parsed by the
task's row parser; a bad label file skips its image, with the reason, never a crash later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...data import image_check
from ...data.errors import EmptySplitError
from ...data.image_cache import ImageCache, cache_failures
from ...data.split_index import DataProblem, SplitIndex
from ...data.yolo_reader import label_path_for, list_split_images

log = logging.getLogger(__name__)

ParsedLabels = tuple[np.ndarray, list[Any]]
"""A label file's content: ``float32 [n, 5]`` box rows (class, cx, cy, w, h normalised) and one
extra per row."""
RowParser = Callable[[str], ParsedLabels]
"""The text of one label file -> its rows; raises ``LabelError`` naming the line."""


class LabelError(ValueError):
    """A label file that cannot be used (the message says where and why; its image is skipped)."""


@dataclass(frozen=True)
class InstanceSplit:
    """One checked split of an instance task (see the module docstring)."""

    name: str
    images: list[Path]
    labels: list[np.ndarray]
    extras: list[list[Any]]
    sizes: list[tuple[int, int]]
    names: dict[int, str]
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.images)

    @property
    def nc(self) -> int:
        return len(self.names)

    def n_instances(self) -> int:
        return int(sum(len(lab) for lab in self.labels))

    def index(self) -> SplitIndex:
        """The images and boxes as detection's index (what the image cache reads)."""
        return SplitIndex(self.name, list(self.images), list(self.labels), list(self.sizes), dict(self.names),
                          list(self.problems), self.source)

    def subset(self, keep: Sequence[int], problems: Sequence[DataProblem] = ()) -> InstanceSplit:
        return replace(self, images=[self.images[i] for i in keep], labels=[self.labels[i] for i in keep],
                       extras=[self.extras[i] for i in keep], sizes=[self.sizes[i] for i in keep],
                       problems=[*self.problems, *problems])

    def __add__(self, other: InstanceSplit) -> InstanceSplit:
        return replace(self, images=self.images + other.images, labels=self.labels + other.labels,
                       extras=self.extras + other.extras, sizes=self.sizes + other.sizes,
                       problems=self.problems + other.problems,
                       counts={k: self.counts.get(k, 0) + other.counts.get(k, 0)
                               for k in {*self.counts, *other.counts}})


def scan_yolo_split(entries: Sequence[Path], root: Path, split: str, source: str, names: dict[int, str],
                    parse: RowParser) -> InstanceSplit:
    """Check every image of YOLO entries (folders, lists, images) and parse its label file."""
    images, problems = list_split_images(entries, root, split, source)
    nc = len(names)

    def check(image: Path) -> tuple[image_check.ImageCheck, ParsedLabels | str | None]:
        verdict = image_check.check_image(image)
        if verdict.error is not None:
            return verdict, None
        label = label_path_for(image)
        try:
            text = label.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            return verdict, None
        except (OSError, UnicodeDecodeError) as err:
            return verdict, f"{label}: cannot read the label file ({err})"
        try:
            rows, extras = parse(text)
        except LabelError as err:
            return verdict, f"{label}: {err}"
        bad = np.flatnonzero((rows[:, 0] < 0) | (rows[:, 0] >= nc))
        if len(bad):
            return verdict, (f"{label}: row {int(bad[0]) + 1} has class id {int(rows[bad[0], 0])}, outside "
                             f"0..{nc - 1} (nc={nc} from {source})")
        return verdict, (rows, extras)

    out = InstanceSplit(split, [], [], [], [], dict(names), list(problems), source, {"no_label_file": 0})
    with ThreadPoolExecutor() as pool:
        for image, (verdict, labels) in zip(images, pool.map(check, images)):
            add_image(out, image, verdict, labels)
    return out


def add_image(split: InstanceSplit, image: Path, verdict: image_check.ImageCheck,
              labels: ParsedLabels | str | None) -> None:
    """Record one image: kept with its labels (None: no label file, a background image) or skipped
    (an image or label problem, a string)."""
    if verdict.error is not None or verdict.size is None:
        split.problems.append(DataProblem(image, verdict.error or "unreadable image"))
        return
    if isinstance(labels, str):
        split.problems.append(DataProblem(image, labels))
        return
    if labels is None:
        split.counts["no_label_file"] = split.counts.get("no_label_file", 0) + 1
        labels = (np.zeros((0, 5), np.float32), [])
    split.images.append(image)
    split.sizes.append(verdict.size)
    split.labels.append(np.asarray(labels[0], np.float32).reshape(-1, 5))
    split.extras.append(list(labels[1]))


def report(split: InstanceSplit, what: str) -> InstanceSplit:
    """One warning per problem file and one summary line; an error when nothing is usable."""
    for problem in split.problems:
        log.warning("%s: %s %s: %s", split.name, "skipped" if problem.skipped else "used", problem.path, problem.reason)
    skipped = sum(p.skipped for p in split.problems)
    backgrounds = sum(len(lab) == 0 for lab in split.labels)
    log.info("%s: %d images, %d %s, %d skipped, %d backgrounds", split.name, len(split), split.n_instances(), what,
             skipped, backgrounds)
    if not split.images:
        raise EmptySplitError(f"{split.name}: no usable image in {split.source}"
                              + (f" ({skipped} skipped: reasons above)" if skipped else ""))
    return split


def usable_instances(split: InstanceSplit, cache: ImageCache) -> tuple[InstanceSplit, ImageCache, list[DataProblem]]:
    """Leave out the images the image cache could not decode (changed after the check)."""
    if not cache.failed:
        return split, cache, []
    problems, keep = cache_failures(split.name, split.images, cache)
    return split.subset(keep, problems), cache.without(sorted(cache.failed)), problems
