"""Read and check a paired restoration dataset: degraded inputs and their clean targets.

The description is a YAML file (or a dict) naming, per split, a folder of inputs and a folder of
targets; pairs match by their path relative to those folders, suffix aside::

    path: datasets/sidd          # root (optional: the yaml's folder)
    train:
      input: train/input         # degraded images (noisy, blurred...)
      target: train/target       # the clean images, same relative names
    val: val                     # short form: <root>/val/input and <root>/val/target

Everything that could stop an epoch halfway is found before training starts and reported with
the file's path and the fix: an input without a target, a target without an input, a pair whose
sizes differ, a file that does not decode. Such pairs are left out (one warning line each); a
split with nothing usable is an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ...data import image_check
from ...data.description import description_root, read_description
from ...data.errors import DataConfigError, EmptySplitError
from ...data.split_index import DataProblem
from ...data.yolo_reader import list_split_images

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
NAMES = {0: "image"}  # restoration has no classes: one nominal class keeps the jobs' bookkeeping
_EXAMPLE = "path: datasets/mydata\ntrain:\n  input: train/input\n  target: train/target\nval:\n  input: val/input\n  target: val/target"


@dataclass(frozen=True)
class PairedData:
    """A parsed restoration dataset description with every path resolved.

    Attributes:
        root: the dataset root.
        splits: per split present, its ``(input folder, target folder)``.
        source: where it came from (the yaml path, or ``"data dict"``), for messages.
    """

    root: Path
    splits: dict[str, tuple[Path, Path]]
    source: str
    nc: int = 1
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))

    @property
    def train(self) -> tuple[Path, Path] | None:
        return self.splits.get("train")

    @property
    def val(self) -> tuple[Path, Path] | None:
        return self.splits.get("val")

    @property
    def test(self) -> tuple[Path, Path] | None:
        return self.splits.get("test")


@dataclass(frozen=True)
class PairSplit:
    """One checked split: every pair decodes and its two images have one size.

    Attributes:
        name: split name; inputs, targets: paired paths in a stable order; sizes: ``(h, w)``
        per pair; problems: pairs skipped; source: the description it came from.
    """

    name: str
    inputs: list[Path]
    targets: list[Path]
    sizes: list[tuple[int, int]]
    problems: list[DataProblem] = field(default_factory=list)
    source: str = ""
    names: dict[int, str] = field(default_factory=lambda: dict(NAMES))

    def __len__(self) -> int:
        return len(self.inputs)


def load_paired_data(data: str | os.PathLike[str] | Mapping[str, object] | PairedData, *,
                     bundled: str = "shapes-restore") -> PairedData:
    """Parse a paired dataset description (a yaml path, a folder holding ``data.yaml``, a dict);
    ``bundled``: the task's bundled set, which messages suggest.

    Raises:
        DataConfigError: a missing file, invalid YAML, no ``train`` split, or a split that is not
            a folder name or an ``input``/``target`` mapping.
    """
    if isinstance(data, PairedData):
        return data
    return _from_mapping(*read_description(data, example=_EXAMPLE, bundled=bundled, kind="a restoration dataset"))


def _from_mapping(raw: Mapping[str, object], base: Path, source: str) -> PairedData:
    root = description_root(raw, base)
    splits = {}
    for split in SPLITS:
        value = raw.get(split)
        if value in (None, ""):
            continue
        if isinstance(value, str | os.PathLike):
            folder = root / Path(value)
            splits[split] = (folder / "input", folder / "target")
        elif isinstance(value, Mapping) and set(value) == {"input", "target"}:
            splits[split] = (root / Path(str(value["input"])), root / Path(str(value["target"])))
        else:
            raise DataConfigError(f"{source}: {split}={value!r} must be a folder holding input/ and target/, or a "
                                  f"mapping with exactly the keys input and target; e.g.\n{_EXAMPLE}")
    if "train" not in splits:
        raise DataConfigError(f"{source}: no 'train' split; a restoration dataset looks like\n{_EXAMPLE}")
    if "names" in raw or "nc" in raw:
        log.warning("%s: 'names'/'nc' ignored: restoration pairs have no classes", source)
    return PairedData(root, splits, source)


def read_pair_split(data: PairedData, split: str) -> PairSplit:
    """Pair the split's inputs with their targets, check every pair, log the problems and a summary.

    Raises:
        DataConfigError: the description has no such split.
        EmptySplitError: a folder does not exist, or no pair is usable.
    """
    if split not in data.splits:
        raise DataConfigError(f"{data.source}: no {split!r} split (it has {', '.join(data.splits)})")
    input_dir, target_dir = data.splits[split]
    for folder, what in ((input_dir, "input"), (target_dir, "target")):
        if not folder.is_dir():
            raise EmptySplitError(f"{split}: the {what} folder {folder} does not exist (from {data.source})")
    inputs, problems = list_split_images([input_dir], data.root, split, data.source)
    targets_found, _ = list_split_images([target_dir], data.root, split, data.source)
    by_key = {_pair_key(p, target_dir): p for p in targets_found}
    pairs: list[tuple[Path, Path]] = []
    for image in inputs:
        target = by_key.pop(_pair_key(image, input_dir), None)
        if target is None:
            problems.append(DataProblem(image, f"no target: nothing named {_pair_key(image, input_dir)}.* in "
                                               f"{target_dir}; add the clean image, or remove this input"))
        else:
            pairs.append((image, target))
    problems += [DataProblem(t, f"a target without an input in {input_dir}; it is not used") for t in by_key.values()]
    with ThreadPoolExecutor() as pool:
        checks = list(pool.map(lambda pair: _check_pair(*pair), pairs))
    kept_in, kept_tg, sizes = [], [], []
    for (image, target), (size, error) in zip(pairs, checks):
        if error is not None or size is None:
            problems.append(DataProblem(image, error or "no size"))
            continue
        kept_in.append(image)
        kept_tg.append(target)
        sizes.append(size)
    found = PairSplit(split, kept_in, kept_tg, sizes, problems, data.source)
    for problem in problems:
        log.warning("%s: %s %s: %s", split, "skipped" if problem.skipped else "used", problem.path, problem.reason)
    log.info("%s: %d image pairs, %d problems%s", split, len(found), len(problems), " (see above)" if problems else "")
    if not found.inputs:
        raise EmptySplitError(f"{split}: no usable input + target pair in {input_dir} and {target_dir} (from "
                              f"{data.source})" + (f": all {len(problems)} were skipped (reasons above)" if problems
                                                  else "; a split needs images with the same names in both folders"))
    return found


def _pair_key(path: Path, folder: Path) -> str:
    """How a pair is matched: the path below its folder, without the suffix (``a/b.png`` -> ``a/b``)."""
    return path.relative_to(folder).with_suffix("").as_posix()


def _check_pair(image: Path, target: Path) -> tuple[tuple[int, int] | None, str | None]:
    """``(size, None)`` for a usable pair, ``(None, why)`` otherwise (never raises for a bad file)."""
    first = image_check.check_image(image)
    if first.error is not None:
        return None, first.error
    second = image_check.check_image(target)
    if second.error is not None:
        return None, f"its target {target}: {second.error}"
    a, b = first.size, second.size
    if a is None or b is None:
        return None, "no readable size"
    if a != b:
        return None, (f"input is {a[1]}x{a[0]} (w x h) but its target {target} is {b[1]}x{b[0]}; a pair shows one "
                      "scene pixel for pixel: re-export one of them at the other's size")
    return a, None
