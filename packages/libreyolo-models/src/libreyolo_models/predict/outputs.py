"""What ``predict`` writes besides annotated images and videos: YOLO-format labels, crops per class, and a
window per image when there is a display.

``PredictOutputs`` is built once per ``predict`` call from its settings and handles each
``Results`` as it is made, so a long stream writes as it goes instead of at the end.

Layout under the run folder (``runs/predict/exp``)::

    <stem>.jpg                  annotated image (save=True)
    labels/<stem>.txt           one line per box: class cx cy w h [conf], normalised (save_txt=True);
                                segment: class x1 y1 ... (the outline); pose: the box, then x y conf per keypoint
    crops/<class name>/<stem>.jpg   each box cut from the original image (save_crop=True)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..tasks.drawing import has_display
from ..tasks.results import Results

if TYPE_CHECKING:
    from ..settings import PredictConfig

log = logging.getLogger(__name__)


def wants_run_dir(cfg: PredictConfig) -> bool:
    """Whether this predict call writes anything to a run folder."""
    return bool(cfg.save or cfg.save_txt or cfg.save_crop)


def yolo_label_lines(res: Results, *, save_conf: bool = False) -> list[str]:
    """``class cx cy w h [conf]`` per box, normalised to the original image (the YOLO label format,
    so a prediction folder can be trained on or compared with ground truth)."""
    for content in (res.masks, *res.contents.values()):  # instance and text tasks write their own rows
        lines = getattr(content, "label_lines", None)
        if callable(lines):
            return list(lines(res.boxes, save_conf=save_conf))
    if res.boxes is None:
        return []
    rows = []
    for (cx, cy, w, h), conf, cls in zip(res.boxes.xywhn.tolist(), res.boxes.conf.tolist(),
                                         res.boxes.cls.tolist()):
        line = f"{int(cls)} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}"
        rows.append(line + (f" {conf:.6f}" if save_conf else ""))
    return rows


def crop_boxes(res: Results) -> list[tuple[str, np.ndarray]]:
    """``(class name, RGB crop)`` per box, cut from the original image (clipped to it, at least one
    pixel wide and tall)."""
    if res.boxes is None:
        return []
    h, w = res.orig_shape
    crops = []
    for x1, y1, x2, y2, _, cls in res.boxes.data.tolist():
        left, top = min(max(int(x1), 0), w - 1), min(max(int(y1), 0), h - 1)
        right, bottom = max(min(int(np.ceil(x2)), w), left + 1), max(min(int(np.ceil(y2)), h), top + 1)
        crops.append((res.names.get(int(cls), str(int(cls))), res.orig_img[top:bottom, left:right].copy()))
    return crops


class PredictOutputs:
    """Writes the per-image outputs ``cfg`` asks for into ``save_dir`` and shows images."""

    def __init__(self, cfg: PredictConfig, save_dir: Path | None) -> None:
        self.cfg, self.save_dir = cfg, save_dir
        self.show = cfg.show and has_display()
        self._warned: set[str] = set()
        if cfg.show and not self.show:
            log.warning("show=True: no display found (DISPLAY / WAYLAND_DISPLAY unset), so no window opens; "
                        "use save=True to write the annotated images instead")

    def handle(self, res: Results, stem: str) -> None:
        """Labels, crops and the window one result asks for; ``stem`` names its files (the
        predictor makes it unique and saves the annotated image or video itself)."""
        if self.save_dir is not None:
            if self.cfg.save_txt:
                self._save_txt(res, stem)
            if self.cfg.save_crop:
                self._save_crops(res, stem)
        if self.show:
            res.show()

    def _save_txt(self, res: Results, stem: str) -> None:
        if res.boxes is None and not any(callable(getattr(c, "label_lines", None))
                                         for c in (res.masks, *res.contents.values())):
            self._warn_once("save_txt", "save_txt=True writes a label row per object; this model's results have "
                                        "no boxes or rows to write, so no label files are written")
            return
        path = self.save_dir / "labels" / f"{stem}.txt"  # type: ignore[operator]
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = yolo_label_lines(res, save_conf=self.cfg.save_conf)
        path.write_text("".join(line + "\n" for line in lines))

    def _save_crops(self, res: Results, stem: str) -> None:
        from PIL import Image

        if res.boxes is None:
            self._warn_once("save_crop", "save_crop=True cuts out boxes; this model's results have none")
            return
        seen: dict[str, int] = {}
        for cls_name, crop in crop_boxes(res):
            n = seen[cls_name] = seen.get(cls_name, 0) + 1
            folder = self.save_dir / "crops" / cls_name  # type: ignore[operator]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(crop).save(folder / (f"{stem}.jpg" if n == 1 else f"{stem}_{n}.jpg"))

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)
