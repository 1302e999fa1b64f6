"""Pose data: YOLO keypoint labels and COCO keypoints JSON, with the dataset's keypoint layout.

data.yaml keys beside detection's (Ultralytics' names; ``oks_sigmas`` is upstream LibreYOLO's):

- ``kpt_shape: [K, 2]`` or ``[K, 3]``: keypoints per object, and whether labels carry a visibility
  (without one, every keypoint is visible). Required for YOLO labels; a COCO file's category
  ``keypoints`` names give ``K`` when it is absent.
- ``flip_idx: [...]``: which keypoint each one becomes in a mirrored image (left and right
  swap); a permutation of ``0..K-1``. Without one, horizontal flips are turned off for pose
  training (a mirrored left wrist would be labelled as a left wrist).
- ``oks_sigmas: [...]``: per keypoint, its OKS tolerance; COCO's for 17 keypoints, else ``1 / K``.

YOLO rows: ``class cx cy w h x1 y1 [v1] ... xK yK [vK]``, normalised. Visibility 0 means "not
labelled" (its coordinates, often 0 0, are ignored), 1 labelled but hidden, 2 visible. COCO:
``keypoints`` ``[x, y, v] * K`` in pixels, ``bbox`` (else the visible keypoints' extent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ...data.coco_json import load_coco_json
from ...data.data_config import DataConfig, load_data_config
from ...data.errors import DataConfigError
from ...data.label_check import COORD_TOLERANCE
from ..instances.coco import box_row, read_coco_instances
from ..instances.split import InstanceSplit, LabelError, ParsedLabels, report, scan_yolo_split

COCO_SIGMAS = (0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.062, 0.062, 0.107, 0.107,
               0.087, 0.087, 0.089, 0.089)
"""COCO's per-keypoint OKS sigmas of its 17 person keypoints."""
COCO_FLIP_IDX = (0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15)


@dataclass(frozen=True)
class PoseConfig(DataConfig):
    """A dataset description with its keypoint layout (see the module docstring)."""

    kpt_shape: tuple[int, int] = (17, 3)
    flip_idx: tuple[int, ...] | None = None
    sigmas: tuple[float, ...] = COCO_SIGMAS

    @property
    def keypoints(self) -> int:
        """Keypoints per object (what the trainer adapts a pose model to)."""
        return self.kpt_shape[0]


def load_pose_config(data: Any) -> PoseConfig:
    """Parse a pose dataset description (see the module docstring).

    Raises:
        DataConfigError: a missing or malformed ``kpt_shape``, ``flip_idx`` or ``oks_sigmas``.
    """
    if isinstance(data, PoseConfig):
        return data
    config = load_data_config(data)
    extra = dict(config.extra)
    shape = extra.pop("kpt_shape", None)
    if shape is None:
        shape = _coco_keypoint_shape(config)
    if not (isinstance(shape, list | tuple) and len(shape) == 2 and all(isinstance(v, int) for v in shape)
            and shape[0] >= 1 and shape[1] in (2, 3)):
        raise DataConfigError(f"{config.source}: kpt_shape={shape!r}; a pose dataset needs `kpt_shape: [K, 3]` "
                              "(K keypoints as x y visibility) or `[K, 2]` (x y only)")
    k = int(shape[0])
    flip = extra.pop("flip_idx", None)
    if flip is not None and (not isinstance(flip, list | tuple) or sorted(int(v) for v in flip) != list(range(k))):
        raise DataConfigError(f"{config.source}: flip_idx={flip!r} must be a permutation of 0..{k - 1}: for each "
                              "keypoint, the one it becomes in a mirrored image (e.g. left and right wrist swap)")
    sigmas = extra.pop("oks_sigmas", None)
    if sigmas is None:
        sigmas = COCO_SIGMAS if k == 17 else (1.0 / k,) * k
    if not isinstance(sigmas, list | tuple) or len(sigmas) != k or not all(
            isinstance(v, int | float) and v > 0 for v in sigmas):
        raise DataConfigError(f"{config.source}: oks_sigmas={sigmas!r} must list {k} positive numbers, one per keypoint")
    values = {f.name: getattr(config, f.name) for f in fields(DataConfig)}
    values["extra"] = extra
    return PoseConfig(**values, kpt_shape=(k, int(shape[1])),
                      flip_idx=None if flip is None else tuple(int(v) for v in flip),
                      sigmas=tuple(float(v) for v in sigmas))


def _coco_keypoint_shape(config: DataConfig) -> list[int] | None:
    """``[K, 3]`` from the first COCO split's category ``keypoints`` names, if any."""
    for split in ("val", "train"):
        value = getattr(config, split)
        for entry in value if isinstance(value, tuple) else (value,) if value is not None else ():
            if entry.suffix.lower() == ".json" and entry.exists():
                cats: list[Any] = load_coco_json(entry)["categories"]  # type: ignore[assignment]
                names = cats[0].get("keypoints") if cats and isinstance(cats[0], Mapping) else None
                if isinstance(names, list) and names:
                    return [len(names), 3]
    return None


def keypoint_parser(kpt_shape: tuple[int, int]) -> Any:
    """A YOLO row parser for ``kpt_shape`` (see the module docstring)."""
    k, dim = kpt_shape

    def parse(text: str) -> ParsedLabels:
        rows, points = [], []
        for line_no, line in enumerate(text.splitlines(), start=1):
            fields_ = line.split()
            if not fields_:
                continue
            if len(fields_) != 5 + k * dim:
                raise LabelError(f"line {line_no}: {len(fields_)} values; kpt_shape [{k}, {dim}] means 5 + {k * dim}: "
                                 f"'class cx cy w h' then {k} x {'x y v' if dim == 3 else 'x y'}")
            try:
                values = np.asarray([float(f) for f in fields_], dtype=np.float64)
            except ValueError:
                raise LabelError(f"line {line_no}: {line.strip()!r} holds a value that is not a number") from None
            if not np.isfinite(values).all() or values[0] != int(values[0]):
                raise LabelError(f"line {line_no}: the class id must be a whole number and every value finite")
            kp = values[5:].reshape(k, dim)
            if dim == 2:
                kp = np.concatenate((kp, np.full((k, 1), 2.0)), 1)
            labelled = kp[:, 2] > 0
            if not np.isin(kp[:, 2], (0.0, 1.0, 2.0)).all():
                raise LabelError(f"line {line_no}: keypoint visibility must be 0, 1 or 2")
            outside = labelled & ((kp[:, :2] < -COORD_TOLERANCE) | (kp[:, :2] > 1 + COORD_TOLERANCE)).any(1)
            if outside.any():
                j = int(np.flatnonzero(outside)[0])
                raise LabelError(f"line {line_no}: keypoint {j} at ({kp[j, 0]:g}, {kp[j, 1]:g}) is outside [0, 1]; "
                                 "keypoints are normalised by the image width and height")
            box = values[1:5]
            if ((box < -COORD_TOLERANCE) | (box > 1 + COORD_TOLERANCE)).any() or box[2] <= 0 or box[3] <= 0:
                raise LabelError(f"line {line_no}: box {box.tolist()} is not a normalised 'cx cy w h'")
            kp[:, :2] = np.clip(kp[:, :2], 0.0, 1.0)
            rows.append(values[:5])
            points.append(kp.astype(np.float32))
        return np.asarray(rows, np.float32).reshape(-1, 5), points

    return parse


def coco_keypoints_converter(k: int) -> Any:
    """A COCO annotation converter for ``k`` keypoints (pixels -> normalised, ``bbox`` -> a row)."""

    def convert(ann: Mapping[str, Any], cls: int, size: tuple[int, int]) -> tuple[np.ndarray, Any]:
        h, w = size
        raw = ann.get("keypoints")
        if not isinstance(raw, list) or len(raw) != 3 * k:
            raise LabelError(f"keypoints hold {len(raw) if isinstance(raw, list) else raw!r} values, not {3 * k} "
                             f"(x, y, v for each of the {k} keypoints of kpt_shape)")
        kp = np.asarray(raw, dtype=np.float64).reshape(k, 3)
        kp[:, :2] /= np.array([w, h])
        bbox = ann.get("bbox")
        if isinstance(bbox, list) and len(bbox) == 4 and bbox[2] > 0 and bbox[3] > 0:
            x, y, bw, bh = (float(v) for v in bbox)
            box = np.array([x / w, y / h, (x + bw) / w, (y + bh) / h])
        elif (kp[:, 2] > 0).any():
            vis = kp[kp[:, 2] > 0, :2]
            box = np.concatenate((vis.min(0), vis.max(0)))
        else:
            raise LabelError("no bbox and no labelled keypoint: nothing says where the object is")
        kp[:, :2] = np.clip(kp[:, :2], 0.0, 1.0)
        return box_row(cls, box), kp.astype(np.float32)

    return convert


def read_pose_split(config: PoseConfig, split: str) -> InstanceSplit:
    """Read, check and report one split (YOLO entries and COCO JSON files)."""
    entries = config.split_paths(split)
    yolo = [e for e in entries if e.suffix.lower() != ".json"]
    parts = []
    if yolo:
        parts.append(scan_yolo_split(yolo, config.root, split, config.source, config.names,
                                     keypoint_parser(config.kpt_shape)))
    parts += [read_coco_instances(e, config, split, coco_keypoints_converter(config.keypoints))
              for e in entries if e.suffix.lower() == ".json"]
    out = parts[0]
    for part in parts[1:]:
        out = out + part
    return report(out, "objects")

