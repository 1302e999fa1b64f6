"""Read YOLO-format splits: ``images/`` + ``labels/`` trees, image-list ``.txt`` files, or both.

A split entry is one of:

- a folder: every file below it with an image suffix (``IMAGE_SUFFIXES``), sorted, symlinked
  folders included;
- a ``.txt`` list: one image path per line (blank lines and ``#`` comments ignored); a relative
  line is looked up beside the list first, then under the dataset root;
- a single image file.

Each image's labels live at the same path with the last ``images`` folder replaced by ``labels``
and the suffix by ``.txt`` (``d/images/train/a.jpg`` -> ``d/labels/train/a.txt``); a path with no
``images`` folder keeps its label beside the image. No label file means a background image.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from . import image_check, label_check
from .data_config import DataConfig
from .errors import DataConfigError
from .image_check import ImageCheck, is_image_path
from .label_cache import SplitScan, cached_scan, fingerprint
from .label_check import LabelCheck
from .split_index import DataProblem

log = logging.getLogger(__name__)


def label_path_for(image: Path) -> Path:
    """The YOLO label file of ``image``: last ``images`` folder -> ``labels``, suffix -> ``.txt``."""
    parts = image.parts
    for i in range(len(parts) - 2, -1, -1):  # folders only: a file named "images" is not one
        if parts[i] == "images":
            return Path(*parts[:i], "labels", *parts[i + 1:]).with_suffix(".txt")
    return image.with_suffix(".txt")


def list_split_images(entries: Sequence[Path], root: Path, split: str,
                      source: str) -> tuple[list[Path], list[DataProblem]]:
    """The split's image paths, in order, and the list lines that name no existing file.

    An image reached twice (a folder listed twice, or a list naming a file a folder already
    holds) is used once, with one warning: counting it twice would weigh it double in training
    and in the metrics.

    Entries must exist (``load_split`` checks that first, to name them in its error).

    Raises:
        DataConfigError: an entry that is neither a folder, a ``.txt`` list nor an image, or a
            list file that cannot be read.
    """
    images: list[Path] = []
    problems: list[DataProblem] = []
    for entry in entries:
        if entry.is_dir():
            images += _walk_images(entry)
        elif entry.suffix.lower() == ".txt":
            found, missing = _read_image_list(entry, root, source)
            images += found
            problems += missing
        elif is_image_path(entry):
            images.append(entry)
        else:
            raise DataConfigError(f"{source}: {split} entry {entry} is not a folder, an image-list .txt, "
                                  "a COCO .json or an image; point it at one of those")
    unique = list(dict.fromkeys(images))
    if len(unique) < len(images):
        log.warning("%s: %d image(s) are listed more than once in %r of %s (e.g. %s); each is used once",
                    split, len(images) - len(unique), split, source, _first_repeat(images))
    return unique, problems


def _first_repeat(paths: list[Path]) -> Path:
    seen: set[Path] = set()
    for path in paths:
        if path in seen:
            return path
        seen.add(path)
    raise ValueError("no repeated path")


def _walk_images(folder: Path) -> list[Path]:
    """Image files below ``folder``, sorted, following symlinked folders (datasets are often
    assembled from links) but entering each real folder once, so a link cycle cannot loop."""
    found: list[Path] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames.clear()
            continue
        seen.add(real)
        found += (Path(dirpath, name) for name in filenames if is_image_path(Path(name)))
    return sorted(found)


def _read_image_list(list_file: Path, root: Path, source: str) -> tuple[list[Path], list[DataProblem]]:
    try:
        text = list_file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise DataConfigError(f"{source}: cannot read image list {list_file} ({err}); it must be a "
                              "UTF-8 text file with one image path per line") from err
    found: list[Path] = []
    missing: list[DataProblem] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path = Path(line).expanduser()
        candidates = [path] if path.is_absolute() else [list_file.parent / path, root / path]
        candidates = [Path(os.path.abspath(c)) for c in candidates]
        hit = next((c for c in candidates if os.path.lexists(c)), None)
        if hit is None:
            looked = " or ".join(str(c) for c in dict.fromkeys(candidates))
            missing.append(DataProblem(candidates[0], f"listed in {list_file} line {line_no} but not "
                                                      f"found (looked for {looked})"))
        else:
            found.append(hit)
    return found, missing


def read_yolo_split(entries: Sequence[Path], config: DataConfig, split: str, *,
                    use_cache: bool = True) -> SplitScan:
    """Scan a YOLO-format split: verify each image, parse each label file, cache the result.

    Args:
        entries: the split's folders, list files or images (all existing).
        config: the dataset (root, nc and its source for messages).
        split: split name, for the cache file and messages.
        use_cache: read and write ``<labels folder>/<split>.cache.npz``.
    """
    images, listed_problems = list_split_images(entries, config.root, split, config.source)
    if not images:
        return SplitScan(problems=listed_problems)  # nothing to scan or cache; load_split reports it
    labels = [label_path_for(p) for p in images]
    key = fingerprint([p for pair in zip(images, labels) for p in pair],
                      {"reader": "yolo", "nc": config.nc})
    scan = cached_scan(split, _cache_folder(entries[0]), key,
                       lambda: _scan(images, labels, config.nc, config.source), use_cache=use_cache)
    return replace(scan, problems=listed_problems + scan.problems)


def _cache_folder(entry: Path) -> Path:
    """Where a split's label cache belongs: its labels folder, or the image list's folder."""
    if entry.suffix.lower() == ".txt" and not entry.is_dir():
        return entry.parent
    if entry.is_dir():
        return label_path_for(entry / "_").parent
    return label_path_for(entry).parent


def _scan(images: list[Path], labels: list[Path], nc: int, nc_source: str) -> SplitScan:
    def check(pair: tuple[Path, Path]) -> tuple[ImageCheck, LabelCheck | None]:
        verdict = image_check.check_image(pair[0])  # via the module: tests count calls here
        if verdict.error is not None:
            return verdict, None  # no point reading the labels of an image that is skipped
        return verdict, label_check.read_label_file(pair[1], nc, nc_source)

    scan = SplitScan()
    with ThreadPoolExecutor() as pool:  # I/O and PIL's C code overlap well across threads
        for (image, label), (verdict, labs) in zip(zip(images, labels),
                                                    pool.map(check, zip(images, labels))):
            scan.add(image, verdict, label, labs)
    return scan
