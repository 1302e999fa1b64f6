"""Prediction results: boxes in every format users expect, plotting and saving."""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import Tensor

from ..layers.boxes import xyxy_to_xywh
from .classify.probs import Probs
from .drawing import draw_detections, draw_top_classes

if TYPE_CHECKING:
    from ..data.image_files import ShrunkImage

log = logging.getLogger(__name__)


class Boxes:
    """Detections of one image, in original-image pixels.

    ``data`` is ``float [N, 6]``: x1, y1, x2, y2, confidence, class id, sorted by confidence. It is
    a tensor, or a NumPy array after ``Results.numpy()``; every property works on both.
    ``id`` is None unless the boxes come from ``model.track``: then ``int64 [N]`` track ids, one
    per box, stable across the frames of a source.
    """

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int], id: Tensor | None = None) -> None:
        if id is not None and id.shape != (data.shape[0],):
            raise ValueError(f"Boxes: {data.shape[0]} boxes but track ids of shape {tuple(id.shape)}; "
                             "give one id per box")
        # Typed as a tensor, which it is except after ``Results.numpy()`` (the properties check).
        self.data = cast(Tensor, data)
        self.orig_shape = orig_shape
        self.id = None if id is None else id.to(torch.int64)

    @property
    def is_track(self) -> bool:
        """Whether these boxes carry track ids (``model.track``)."""
        return self.id is not None

    def __len__(self) -> int:
        return self.data.shape[0]

    @property
    def xyxy(self) -> Tensor:
        """``[N, 4]`` corners in pixels."""
        return self.data[:, :4]

    @property
    def xywh(self) -> Tensor:
        """``[N, 4]`` centre and size in pixels."""
        if isinstance(self.data, np.ndarray):
            xyxy = self.data[:, :4]
            return np.concatenate(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), axis=1)
        return xyxy_to_xywh(self.xyxy)

    @property
    def _scale(self) -> Tensor:
        h, w = self.orig_shape
        if isinstance(self.data, np.ndarray):
            return np.array([w, h, w, h], dtype=self.data.dtype)
        return torch.tensor([w, h, w, h], dtype=self.data.dtype, device=self.data.device)

    @property
    def xyxyn(self) -> Tensor:
        """``[N, 4]`` corners normalized to [0, 1] by the original width and height."""
        return self.xyxy / self._scale

    @property
    def xywhn(self) -> Tensor:
        """``[N, 4]`` centre and size normalized to [0, 1]."""
        return self.xywh / self._scale

    @property
    def conf(self) -> Tensor:
        return self.data[:, 4]

    @property
    def cls(self) -> Tensor:
        return self.data[:, 5]

    def cpu(self) -> Boxes:
        return self.to("cpu")

    def cuda(self) -> Boxes:
        return self.to("cuda")

    def to(self, device: str | torch.device) -> Boxes:
        """A copy on ``device`` (NumPy-backed boxes become tensors again; track ids follow)."""
        data = torch.from_numpy(self.data) if isinstance(self.data, np.ndarray) else self.data
        return Boxes(data.to(device), self.orig_shape, None if self.id is None else self.id.to(device))

    def numpy(self) -> np.ndarray:
        """``data`` as a NumPy ``[N, 6]`` array."""
        return self.data if isinstance(self.data, np.ndarray) else self.data.cpu().numpy()

    def __repr__(self) -> str:
        ids = "" if self.id is None else f", ids={self.id.tolist()}"
        return f"Boxes(n={len(self)}, orig_shape={self.orig_shape}{ids})"


@dataclass
class Results:
    """What ``model(source)`` returns for one image. Which field is set depends on the model's
    task: ``boxes`` (detect), ``probs`` (classify), ``masks`` (semantic); the others are None."""

    orig_img: np.ndarray          # RGB uint8 [H, W, 3]
    path: str
    names: dict[int, str]
    boxes: Boxes | None = None
    speed: dict[str, float] = field(default_factory=dict)  # ms per image: decode, preprocess, inference, postprocess
    probs: Probs | None = None    # classify: class probabilities (``probs.top1``, ``probs.top5``...)
    masks: Any = None
    source: str = ""               # where it came from: path, URL, camera index, label (see predict.streams)
    frame: int | None = None       # frame index within a video or stream; None for still images
    fps: float | None = None       # frame rate of that video or stream, when it states one
    # model.track only: recent box centres per track id, ``float [K, 2]`` (x, y pixels, oldest
    # first), for the ids in ``boxes.id``; drawn as trails by ``plot``.
    trails: dict[int, np.ndarray] | None = None
    _full: ShrunkImage | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def orig_shape(self) -> tuple[int, int]:
        full = self.__dict__.get("_full")
        if full is not None:
            return full.orig_shape
        return self.orig_img.shape[0], self.orig_img.shape[1]

    def defer_orig_img(self, full: ShrunkImage) -> None:
        """Make ``orig_img`` the full picture of ``full``, decoded on first access: predict read a
        reduced copy for the network (``data.image_files.read_image_for``), and most callers only read the
        boxes; plotting, saving and crops decode it then (once)."""
        self._full = full
        del self.orig_img  # now found by __getattr__ until it is decoded

    def __getattr__(self, name: str) -> Any:
        full = self.__dict__.get("_full")
        if name == "orig_img" and full is not None:
            self.orig_img = image = full.full()
            self._full = None
            return image
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __len__(self) -> int:
        return len(self.boxes) if self.boxes is not None else 0

    def to_list(self) -> list[dict[str, object]]:
        """One dict per detection: name, class, confidence, box (x1, y1, x2, y2 pixels); for a
        semantic model, one per class present: name, class, share of the image's pixels; for a
        classification, one per top-5 class: name, class, confidence."""
        rows: list[dict[str, object]] = []
        if self.probs is not None:
            return [{"name": self.probs.name(c), "class": c, "confidence": float(self.probs.data[c])}
                    for c in self.probs.top5]
        if self.masks is not None:
            return [{"name": self.names.get(c, str(c)), "class": c, "share": share}
                    for c, share in self.masks.pixel_shares().items()]
        if self.boxes is None:
            return rows
        ids = self.boxes.id.tolist() if self.boxes.id is not None else [None] * len(self.boxes)
        for (x1, y1, x2, y2, conf, cls), track_id in zip(self.boxes.data.tolist(), ids):
            row: dict[str, object] = {"name": self.names.get(int(cls), str(int(cls))), "class": int(cls),
                                      "confidence": conf, "box": {"x1": x1, "y1": y1, "x2": x2, "y2": y2}}
            if track_id is not None:
                row["track_id"] = track_id
            rows.append(row)
        return rows

    def to_json(self, *, normalize: bool = False, decimals: int = 5) -> str:
        """``to_list()`` as a JSON array; ``normalize``: box coordinates in [0, 1] of the original
        image instead of pixels; values rounded to ``decimals``."""
        h, w = self.orig_shape
        rows = self.to_list()
        for row in rows:
            if "box" in row:
                box = cast(dict[str, float], row["box"])
                if normalize:
                    box.update(x1=box["x1"] / w, y1=box["y1"] / h, x2=box["x2"] / w, y2=box["y2"] / h)
                row["box"] = {k: round(v, decimals) for k, v in box.items()}
            for key in ("confidence", "share"):
                if key in row:
                    row[key] = round(float(row[key]), decimals)  # type: ignore[arg-type]
        return json.dumps(rows)

    def to_csv(self, *, normalize: bool = False, decimals: int = 5) -> str:
        """One CSV row per detection (``name,class,confidence,x1,y1,x2,y2``, then ``track_id`` for
        tracked boxes), per class present for a semantic model (``name,class,share``), or per top-5
        class for a classification (``name,class,confidence``); with a header line."""
        rows = json.loads(self.to_json(normalize=normalize, decimals=decimals))
        flat = [{**{k: v for k, v in row.items() if k != "box"}, **row.get("box", {})} for row in rows]
        if self.probs is not None:
            columns = ["name", "class", "confidence"]
        elif self.masks is not None:
            columns = ["name", "class", "share"]
        else:
            columns = ["name", "class", "confidence", "x1", "y1", "x2", "y2"]
            if self.boxes is not None and self.boxes.id is not None:
                columns.append("track_id")
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(flat)
        return buf.getvalue()

    def to(self, device: str | torch.device) -> Results:
        """A copy whose boxes (masks, probabilities) live on ``device``; the image stays a NumPy array."""
        boxes = self.boxes.to(device) if self.boxes is not None else None
        masks = type(self.masks)(_tensor(self.masks.data).to(device)) if self.masks is not None else None
        probs = Probs(_tensor(self.probs.data).to(device), self.probs.names) if self.probs is not None else None
        return self._with(boxes=boxes, masks=masks, probs=probs)

    def _with(self, **changes: Any) -> Results:
        """``dataclasses.replace`` that leaves a deferred ``orig_img`` deferred in the copy."""
        full = self.__dict__.get("_full")
        if full is None:
            return replace(self, **changes)
        copy = replace(self, orig_img=full.pixels, **changes)  # a stand-in, deferred again below
        copy.defer_orig_img(full)
        return copy

    def cpu(self) -> Results:
        return self.to("cpu")

    def cuda(self) -> Results:
        return self.to("cuda")

    def numpy(self) -> Results:
        """A copy whose ``boxes.data`` (or ``masks.data``) is a NumPy array; probabilities move to the
        CPU (``probs.numpy()`` gives their array)."""
        boxes = Boxes(self.boxes.numpy(), self.boxes.orig_shape,
                      None if self.boxes.id is None else self.boxes.id.cpu()) if self.boxes is not None else None
        masks = type(self.masks)(self.masks.numpy()) if self.masks is not None else None
        probs = self.probs.cpu() if self.probs is not None else None  # Probs' ranking needs a tensor
        return self._with(boxes=boxes, masks=masks, probs=probs)

    def show(self, title: str | None = None) -> None:
        """Open the annotated image in a window; without a display, a warning and nothing else."""
        from ..predict.outputs import has_display

        if not has_display():
            log.warning("show(): no display found (DISPLAY / WAYLAND_DISPLAY unset); "
                                                "use save() to write the annotated image instead")
            return
        from PIL import Image

        Image.fromarray(self.plot()).show(title=title or self.path)

    def summary(self) -> str:
        """``"2 circles, 1 square"`` style count of detections per class; for a semantic model the
        classes present with their share of the pixels (``"background 81%, circle 12%"``); for a
        classification, the top-5 classes with their probabilities."""
        if self.probs is not None:
            return self.probs.summary()
        if self.masks is not None:
            return ", ".join(f"{self.names.get(c, str(c))} {share:.0%}" for c, share in self.masks.pixel_shares().items())
        if self.boxes is None or not len(self):
            return "no detections"
        counts: dict[str, int] = {}
        for cls in self.boxes.cls.tolist():
            name = self.names.get(int(cls), str(int(cls)))
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{n} {name}" for name, n in counts.items())

    def plot(self, *, labels: bool = True, conf: bool = True, line_width: int | None = None) -> np.ndarray:
        """A copy of the original image with boxes and labels drawn (semantic: each pixel tinted
        with its class colour; a classification: its top-5 classes and probabilities, written
        top-left; tracking: ids in the labels, a colour per id, and trails of the recent
        centres); RGB uint8 ``[H, W, 3]``."""
        if self.probs is not None:
            lines = [f"{self.probs.name(c)} {float(self.probs.data[c]):.2f}" for c in self.probs.top5]
            return draw_top_classes(self.orig_img, lines if conf else [line.rsplit(" ", 1)[0] for line in lines])
        if self.masks is not None:
            return self.masks.overlay(self.orig_img)
        if self.boxes is None:
            return self.orig_img.copy()
        ids = None if self.boxes.id is None else self.boxes.id.tolist()
        return draw_detections(self.orig_img, _tensor(self.boxes.data).cpu(), self.names, labels=labels,
                               conf=conf, line_width=line_width, ids=ids, trails=self.trails)

    def save(self, filename: str | Path) -> Path:
        """Write the annotated image (format from the suffix); returns the path."""
        from PIL import Image

        path = Path(filename).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(self.plot()).save(path)
        return path

    def __repr__(self) -> str:
        return f"Results(path={self.path!r}, shape={self.orig_shape}, {self.summary()})"


def _tensor(data: Tensor | np.ndarray) -> Tensor:
    return torch.from_numpy(data) if isinstance(data, np.ndarray) else data


class ResultsList(list):
    """What ``model(source)`` returns: one ``Results`` per readable image, in input order.

    A plain list, plus ``skipped``: ``(name, reason)`` for each item of a folder, glob, list or
    stream that could not be read (each was also logged as a warning).
    """

    def __init__(self, results: list[Results] | None = None, skipped: list[tuple[str, str]] | None = None) -> None:
        super().__init__(results or [])
        self.skipped: list[tuple[str, str]] = list(skipped or [])
