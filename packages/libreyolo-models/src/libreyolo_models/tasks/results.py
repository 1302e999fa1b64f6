"""Prediction results: one ``Results`` per image or frame, whatever the task, with plotting,
saving and conversions.

The built-in tasks fill ``boxes`` (detect), ``probs`` (classify) or ``masks`` (semantic); instance
segmentation fills ``boxes`` and ``masks`` (one mask per box), pose ``boxes`` and ``keypoints``. A task
defined elsewhere (a plugin, a new task of the zoo) puts its own content under its
``results_field`` name in ``contents``: any object with the small ``ResultContent`` protocol.
``results.<name>`` then reads it, and ``summary``, ``plot``, ``to_list``, ``to_json``, ``to_csv``,
``to``, ``cpu`` and ``numpy`` go through it, with no edit here."""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from .classify.probs import Probs
from .detect.boxes import Boxes
from .drawing import draw_detections, draw_top_classes

log = logging.getLogger(__name__)


class FullPicture(Protocol):
    """A picture ``orig_img`` is made from on first access (``Results.defer_orig_img``): a reduced
    decode's file (``data.image_files.ShrunkImage``) or a planar video frame (``predict.planar``)."""

    @property
    def orig_shape(self) -> tuple[int, int]:
        """The picture's ``(h, w)``."""

    def full(self) -> np.ndarray:
        """The picture, RGB uint8 ``[h, w, 3]``."""


class ResultContent(Protocol):
    """What a task's content of ``Results`` provides (the built-in ones are ``Boxes``, ``Probs``,
    ``SemanticMask``; a new task brings its own)."""

    csv_columns: tuple[str, ...]
    """The columns of ``to_csv``, in order (the keys of ``rows``, flattened)."""

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        """One dict per item (an object, a class, a point...), plain Python values."""

    def summary(self, names: dict[int, str]) -> str:
        """One line: what the image holds (``"2 circles, 1 square"``)."""

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """A copy of ``image`` (RGB uint8) with the content drawn."""

    def to(self, device: str | torch.device) -> ResultContent:
        """A copy whose tensors live on ``device``."""

    def numpy(self) -> ResultContent:
        """A copy whose tensors are NumPy arrays."""

    def __len__(self) -> int: ...


@dataclass
class Results:
    """What ``model(source)`` returns for one image. Which field is set depends on the model's
    task: ``boxes`` (detect), ``probs`` (classify), ``masks`` (semantic: a class map), ``boxes`` and
    ``masks`` (segment: a mask per box), ``boxes`` and ``keypoints`` (pose); the others are None."""

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
    # a task's own content by its results_field name (a task outside boxes/probs/masks)
    contents: dict[str, ResultContent] = field(default_factory=dict)
    _full: FullPicture | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def orig_shape(self) -> tuple[int, int]:
        full = self.__dict__.get("_full")
        if full is not None:
            return full.orig_shape
        return self.orig_img.shape[0], self.orig_img.shape[1]

    def defer_orig_img(self, full: FullPicture) -> None:
        """Make ``orig_img`` the full picture of ``full``, decoded on first access: predict read a
        reduced copy for the network (``data.image_files.read_image_for``) or left the conversion of a
        video frame to the device (``predict.planar``), and most callers only read the boxes;
        plotting, saving and crops decode it then (once)."""
        self._full = full
        del self.orig_img  # now found by __getattr__ until it is decoded

    def __getattr__(self, name: str) -> Any:
        full = self.__dict__.get("_full")
        if name == "orig_img" and full is not None:
            self.orig_img = image = full.full()
            self._full = None
            return image
        contents = self.__dict__.get("contents")
        if contents is not None and name in contents:
            return contents[name]
        if not name.startswith("_") and _is_results_field(name):
            return None  # another task's content: absent here, as boxes is for a classifier
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _content(self) -> ResultContent | None:
        """The task content of a task outside the built-in three (the first, when several), or
        instance masks (``masks`` holding a ``ResultContent``, beside ``boxes``)."""
        if self.contents:
            return next(iter(self.contents.values()))
        return self.masks if _is_content(self.masks) else None

    def _drawn_contents(self) -> list[ResultContent]:
        """What ``plot`` draws before the boxes: every task content, instance masks first."""
        return ([self.masks] if _is_content(self.masks) else []) + list(self.contents.values())

    def __len__(self) -> int:
        if self.boxes is not None:
            return len(self.boxes)
        content = self._content()
        return len(content) if content is not None else 0

    def to_list(self) -> list[dict[str, object]]:
        """One dict per detection: name, class, confidence, box (x1, y1, x2, y2 pixels), plus what
        an instance task's content adds per object (a polygon, keypoints); for a semantic model,
        one per class present: name, class, share of the image's pixels; for a classification,
        one per top-5 class: name, class, confidence."""
        content = self._content()
        if content is not None and self.boxes is None:
            return content.rows(self.names)
        if self.probs is not None:
            return [{"name": self.probs.name(c), "class": c, "confidence": float(self.probs.data[c])}
                    for c in self.probs.top5]
        if self.masks is not None and self.boxes is None:
            return [{"name": self.names.get(c, str(c)), "class": c, "share": share}
                    for c, share in self.masks.pixel_shares().items()]
        rows = self._box_rows()
        if content is not None:
            rows = [{**row, **extra} for row, extra in zip(rows, content.rows(self.names))]
        return rows

    def _box_rows(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
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
        content = self._content()
        if content is not None and self.boxes is None:
            columns = list(content.csv_columns)
        elif self.probs is not None:
            columns = ["name", "class", "confidence"]
        elif self.masks is not None and self.boxes is None:
            columns = ["name", "class", "share"]
        else:
            columns = ["name", "class", "confidence", "x1", "y1", "x2", "y2"]
            if self.boxes is not None and self.boxes.id is not None:
                columns.append("track_id")
            if content is not None:
                columns += list(content.csv_columns)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(flat)
        return buf.getvalue()

    def to(self, device: str | torch.device) -> Results:
        """A copy whose boxes (masks, probabilities) live on ``device``; the image stays a NumPy array."""
        boxes = self.boxes.to(device) if self.boxes is not None else None
        if _is_content(self.masks):
            masks = self.masks.to(device)
        else:
            masks = type(self.masks)(_tensor(self.masks.data).to(device)) if self.masks is not None else None
        probs = Probs(_tensor(self.probs.data).to(device), self.probs.names) if self.probs is not None else None
        contents = {name: content.to(device) for name, content in self.contents.items()}
        return self._with(boxes=boxes, masks=masks, probs=probs, contents=contents)

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
        if _is_content(self.masks):
            masks = self.masks.numpy()
        else:
            masks = type(self.masks)(self.masks.numpy()) if self.masks is not None else None
        probs = self.probs.cpu() if self.probs is not None else None  # Probs' ranking needs a tensor
        contents = {name: content.numpy() for name, content in self.contents.items()}
        return self._with(boxes=boxes, masks=masks, probs=probs, contents=contents)

    def show(self, title: str | None = None) -> None:
        """Open the annotated image in a window; without a display, a warning and nothing else."""
        from .drawing import has_display

        if not has_display():
            log.warning("show(): no display found (DISPLAY / WAYLAND_DISPLAY unset); "
                                                "use save() to write the annotated image instead")
            return
        from PIL import Image

        Image.fromarray(self.plot()).show(title=title or self.path)

    def summary(self) -> str:
        """``"2 circles, 1 square"`` style count of detections per class; for a semantic model the
        classes present with their share of the pixels (``"background 81%, circle 12%"``); for a
        classification, the top-5 classes with their probabilities; another task's, its content's."""
        content = self._content()
        if content is not None and self.boxes is None:
            return content.summary(self.names)
        if self.probs is not None:
            return self.probs.summary()
        if self.masks is not None and self.boxes is None:
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
        centres; another task: its content drawn); RGB uint8 ``[H, W, 3]``."""
        image = self.orig_img
        drawn = self._drawn_contents()
        for content in drawn:
            image = content.plot(image, self.names, labels=labels, conf=conf)
        if drawn and self.boxes is None:
            return image
        if self.probs is not None:
            lines = [f"{self.probs.name(c)} {float(self.probs.data[c]):.2f}" for c in self.probs.top5]
            return draw_top_classes(image, lines if conf else [line.rsplit(" ", 1)[0] for line in lines])
        if self.masks is not None and not drawn:
            return self.masks.overlay(image)
        if self.boxes is None:
            return image.copy()
        ids = None if self.boxes.id is None else self.boxes.id.tolist()
        return draw_detections(image, _tensor(self.boxes.data).cpu(), self.names, labels=labels,
                               conf=conf, line_width=line_width, ids=ids, trails=self.trails)

    def save(self, filename: str | Path) -> Path:
        """Write the annotated image (format from the suffix); returns the path. A task content with
        a ``save(path, image)`` of its own (a matte: the RGBA cut-out and the alpha) writes instead."""
        from PIL import Image

        path = Path(filename).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = getattr(self._content(), "save", None) if self.boxes is None else None
        if callable(writer):
            return Path(writer(path, self.orig_img))
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


RESULTS_FIELDS: set[str] = {"boxes", "probs", "masks"}
"""Every known task's ``Results`` field (the task registry adds each task's as it registers)."""


def _is_content(value: object) -> bool:
    """Whether ``value`` is a task's ``ResultContent`` (instance masks in ``masks``), not a
    semantic class map."""
    return value is not None and callable(getattr(value, "rows", None))


def _is_results_field(name: str) -> bool:
    """Whether ``name`` is the ``Results`` field of some known task (``keypoints`` of pose...)."""
    return name in RESULTS_FIELDS
