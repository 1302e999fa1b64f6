"""The one entry point from a dataset description to a checked split.

``load_data_config`` (alias ``resolve_dataset``) reads ``data.yaml``, a dict or ``"shapes"``;
``load_split`` turns one split of it into a ``SplitIndex`` that training and validation can use
without surprises: every image in it decodes and every label row is valid. Bad files are left
out with one warning line each, and a summary line follows; a split with nothing usable is an
error before training starts, not halfway through an epoch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from ...data.data_config import DataConfig, load_data_config
from ...data.errors import EmptySplitError
from ...data.image_check import IMAGE_SUFFIXES
from ...data.label_cache import SplitScan
from ...data.split_index import SplitIndex
from ...data.yolo_reader import label_path_for, read_yolo_split
from .coco_reader import read_coco_split

log = logging.getLogger(__name__)

DataSource = str | os.PathLike[str] | Mapping[str, object] | DataConfig


def resolve_dataset(data: DataSource) -> DataConfig:
    """``load_data_config`` under the name users know: ``data="shapes"`` works wherever a path does."""
    return load_data_config(data)


def load_split(config: DataSource, split: str, *, cache: bool = True) -> SplitIndex:
    """Read, check and index one split.

    Args:
        config: a ``DataConfig``, or anything ``load_data_config`` accepts.
        split: ``"train"``, ``"val"`` or ``"test"``.
        cache: reuse (and write) the split's label cache; False rescans every file.

    Returns:
        The usable images with their labels (``float32 [n, 5]`` class, cx, cy, w, h normalized)
        and original sizes, plus every problem found. Logs one warning per problem file and one
        summary line (``"train: 398 images, 1201 boxes, 2 skipped (see above), 5 backgrounds"``).

    Raises:
        DataConfigError: the description lacks the split, or an entry is not a usable kind.
        EmptySplitError: an entry does not exist, or the split has no usable image.
    """
    config = load_data_config(config)
    entries = config.split_paths(split)
    for entry in entries:
        if not entry.exists():
            raise EmptySplitError(f"{split}: {entry} does not exist (from {split!r} in {config.source}); "
                                  "fix the path, which is relative to the dataset root "
                                  f"{config.root}")
    scans: list[SplitScan] = []
    yolo_entries = [e for e in entries if e.suffix.lower() != ".json"]
    if yolo_entries:
        scans.append(read_yolo_split(yolo_entries, config, split, use_cache=cache))
    scans += [read_coco_split(e, config, split, use_cache=cache)
              for e in entries if e.suffix.lower() == ".json"]
    index = SplitIndex(
        name=split,
        images=[p for s in scans for p in s.images],
        labels=[lab for s in scans for lab in s.labels],
        sizes=[size for s in scans for size in s.sizes],
        names=dict(config.names),
        problems=[p for s in scans for p in s.problems],
        source=config.source,
    )
    counts = {k: sum(s.counts.get(k, 0) for s in scans) for k in {k for s in scans for k in s.counts}}
    _report(index, counts)
    if not index.images:
        raise EmptySplitError(_empty_message(index, entries))
    rejected = [p for p in index.problems if p.skipped and p.path.suffix.lower() not in IMAGE_SUFFIXES]
    if rejected and index.n_instances() == 0:  # what is left would teach "no objects anywhere"
        raise EmptySplitError(f"{split}: every labelled image was left out: {len(rejected)} label files were "
                              f"rejected (first: {rejected[0].path}: {rejected[0].reason}), leaving only "
                              f"{len(index)} images without objects; fix the label files (from {config.source})")
    return index


def _report(index: SplitIndex, counts: Mapping[str, int]) -> None:
    """One warning per problem file, a hint when no label file was found, one summary line."""
    split = index.name
    for problem in index.problems:
        verdict = "skipped" if problem.skipped else "used"
        log.warning("%s: %s %s: %s", split, verdict, problem.path, problem.reason)
    no_label_file = counts.get("no_label_file", 0)
    if index.images and no_label_file == len(index.images) and index.n_instances() == 0:
        log.warning("%s: none of the %d images has a label file (e.g. %s), so all are backgrounds; "
                    "labels belong in a 'labels' folder beside 'images', one .txt per image",
                    split, len(index.images), label_path_for(index.images[0]))
    skipped = sum(p.skipped for p in index.problems)
    fixed = len(index.problems) - skipped
    backgrounds = sum(len(lab) == 0 for lab in index.labels)
    summary = (f"{split}: {len(index)} images, {index.n_instances()} boxes, {skipped} skipped"
               + (" (see above)" if skipped else "") + f", {backgrounds} backgrounds")
    if fixed:
        summary += f", {fixed} files fixed (see above)"
    if counts.get("crowd"):
        summary += f", {counts['crowd']} crowd annotations ignored"
    log.info("%s", summary)


def _empty_message(index: SplitIndex, entries: tuple[Path, ...]) -> str:
    looked = ", ".join(str(e) for e in entries)
    if index.problems:
        return (f"{index.name}: none of the split's images is usable: all {len(index.problems)} "
                f"were skipped (reasons in the warnings above); looked in {looked} "
                f"(from {index.source})")
    return (f"{index.name}: no images found in {looked} (from {index.source}); a split needs image "
            f"files ({', '.join(sorted(IMAGE_SUFFIXES))}) in that folder or listed in that file")
