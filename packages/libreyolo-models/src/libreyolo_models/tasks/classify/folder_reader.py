"""One ImageFolder split, checked: every image in it decodes, every problem is named by its path.

What is reported (one warning each, then a summary line), and never a crash mid-epoch:

- an image that cannot be read (corrupt, truncated, not an image): skipped, with the reason;
- a class folder with no images, or no folder at all for a class of ``names``: the class has no
  samples in this split (fine for ``val``, which then reports no accuracy for it; for ``train``
  the model never sees the class), with the fix;
- a folder in the split that is not a class of ``names``, and images lying directly in the
  split folder: not used (their class is unknown), with the fix.

Grayscale, palette, RGBA and 16-bit images are fine: readers decode every image to 8-bit RGB
(``decode.read_image_file``).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...data import image_check
from ...data.errors import EmptySplitError
from ...data.image_check import IMAGE_SUFFIXES, is_image_path
from ...data.split_index import DataProblem
from ...data.yolo_reader import list_split_images
from .folder_config import FolderData, load_folder_data

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClassSplit:
    """One checked classification split.

    Attributes:
        name: ``train``, ``val`` or ``test``.
        images: usable image files, class by class, sorted within a class.
        labels: ``int64 [N]`` class id of each image.
        names: class id -> name.
        problems: what was skipped or is missing, each with its path and reason.
        source: the dataset description it came from.
    """

    name: str
    images: list[Path]
    labels: np.ndarray
    names: dict[int, str]
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""

    def __len__(self) -> int:
        return len(self.images)

    @property
    def nc(self) -> int:
        return len(self.names)

    def counts(self) -> np.ndarray:
        """``int64 [nc]`` images per class."""
        return np.bincount(self.labels, minlength=self.nc)


def load_class_split(data: FolderData | str | Path, split: str) -> ClassSplit:
    """Read and check ``split`` of a classification dataset (see the module docstring).

    Raises:
        DataConfigError: the description is wrong (``folder_config.load_folder_data``).
        EmptySplitError: the split is absent or has no usable image.
    """
    data = load_folder_data(data)
    folder = getattr(data, split, None) if split in ("train", "val", "test") else None
    if folder is None or not folder.is_dir():
        where = folder or data.root / split
        raise EmptySplitError(f"{split}: {where} is not a folder (from {data.source}); a classification "
                              f"split is a folder of class folders, e.g. {where}/{data.names[0]}/image.jpg")
    problems: list[DataProblem] = _stray_entries(folder, data)
    images: list[Path] = []
    labels: list[int] = []
    for cid, name in data.names.items():
        class_dir = folder / name
        found = list_split_images([class_dir], data.root, split, data.source)[0] if class_dir.is_dir() else []
        if not found:
            what = "has no images" if class_dir.is_dir() else "does not exist"
            problems.append(DataProblem(class_dir, f"class {cid} {name!r} {what} in the {split} split; add "
                                                   f"images ({', '.join(sorted(IMAGE_SUFFIXES))}) there, or drop "
                                                   f"the class from names", skipped=False))
        images += found
        labels += [cid] * len(found)
    verdicts = _check_all(images)
    for path, verdict in zip(images, verdicts):
        if verdict.error is not None:
            problems.append(DataProblem(path, f"{verdict.error}; fix or delete the file"))
        elif verdict.note:
            problems.append(DataProblem(path, verdict.note, skipped=False))
    usable = [verdict.error is None for verdict in verdicts]
    result = ClassSplit(split, [p for p, ok in zip(images, usable) if ok],
                        np.asarray([c for c, ok in zip(labels, usable) if ok], dtype=np.int64),
                        dict(data.names), problems, data.source)
    _report(result)
    if not result.images:
        raise EmptySplitError(f"{split}: no usable image in {folder} (from {data.source}); expected "
                              f"{folder}/<class>/*.jpg with classes {', '.join(list(data.names.values())[:5])}"
                              + (" ..." if data.nc > 5 else ""))
    return result


def _stray_entries(folder: Path, data: FolderData) -> list[DataProblem]:
    """Folders that are no class, and images directly in the split folder: never used."""
    known = list(data.names.values())
    problems = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and entry.name not in known:
            problems.append(DataProblem(entry, f"folder {entry.name!r} is not a class of {data.source} "
                                               f"({', '.join(known[:5])}{', ...' if len(known) > 5 else ''}); its images are not used: add "
                                               "it to names, or move its images into a class folder"))
        elif entry.is_file() and is_image_path(entry):
            problems.append(DataProblem(entry, "image outside every class folder, so its class is unknown; "
                                               "move it into its class's folder"))
    return problems


def _check_all(images: list[Path]) -> list[image_check.ImageCheck]:
    with ThreadPoolExecutor() as pool:  # header parsing and file reads overlap well across threads
        return list(pool.map(image_check.check_image, images))


def _report(split: ClassSplit) -> None:
    for problem in split.problems:
        log.warning("%s: %s %s: %s", split.name, "skipped" if problem.skipped else "note", problem.path,
                    problem.reason)
    skipped = sum(p.skipped and is_image_path(p.path) for p in split.problems)
    empty = int((split.counts() == 0).sum())
    log.info("%s: %d images in %d classes, %d skipped%s%s", split.name, len(split), split.nc - empty, skipped,
             " (see above)" if skipped else "", f", {empty} classes without images" if empty else "")
