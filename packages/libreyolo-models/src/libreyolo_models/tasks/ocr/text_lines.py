"""``Results.ocr``: the text lines of one picture: quadrilaterals, their text and confidences."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

LINE_COLOR = (255, 56, 56)


class TextLines:
    """One picture's text lines (a ``ResultContent``), in reading order.

    ``polygons``: ``float32 [N, 4, 2]`` corners in picture pixels (top-left, top-right,
    bottom-right, bottom-left of the text as read); ``texts``: N strings; ``scores``: ``[N]``
    recognition confidence (mean probability of the decoded characters); ``det_scores``: ``[N]``
    the detector's mean text probability inside each box.
    """

    csv_columns: tuple[str, ...] = ("text", "score", "det_score", "x1", "y1", "x2", "y2", "x3", "y3", "x4", "y4")

    def __init__(self, polygons: Tensor | np.ndarray, texts: Sequence[str], scores: Tensor | np.ndarray,
                 det_scores: Tensor | np.ndarray) -> None:
        self.polygons, self.texts, self.scores, self.det_scores = polygons, list(texts), scores, det_scores

    @property
    def text(self) -> str:
        """Every line joined by newlines, in reading order."""
        return "\n".join(self.texts)

    def _np(self, value: Tensor | np.ndarray) -> np.ndarray:
        return torch.as_tensor(value).detach().float().cpu().numpy()

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        polys, scores, det = self._np(self.polygons), self._np(self.scores), self._np(self.det_scores)
        out: list[dict[str, object]] = []
        for i, text in enumerate(self.texts):
            row: dict[str, object] = {"text": text, "score": float(scores[i]), "det_score": float(det[i])}
            for k, (x, y) in enumerate(polys[i].tolist(), start=1):
                row[f"x{k}"], row[f"y{k}"] = float(x), float(y)
            out.append(row)
        return out

    def label_lines(self, boxes: object = None, *, save_conf: bool = False) -> list[str]:
        """``save_txt`` rows, one per line of text, ICDAR-style: the polygon's four corners in
        original pixels, ``x1,y1,...,x4,y4``, then the text (last, so it may hold commas), then the
        recognition score with ``save_conf``."""
        rows = []
        for polygon, text, score in zip(self._np(self.polygons), self.texts, self._np(self.scores), strict=True):
            corners = ",".join(f"{v:.1f}" for v in polygon.reshape(-1))
            rows.append(f"{corners},{text}" + (f",{float(score):.6f}" if save_conf else ""))
        return rows

    def summary(self, names: dict[int, str]) -> str:
        if not self.texts:
            return "no text"
        shown = ", ".join(repr(t) for t in self.texts[:3]) + (", ..." if len(self.texts) > 3 else "")
        return f"{len(self.texts)} text line{'s' if len(self.texts) != 1 else ''}: {shown}"

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """The picture with each line's quadrilateral and, above it, its text (and confidence)."""
        from PIL import Image, ImageDraw

        canvas = Image.fromarray(np.ascontiguousarray(image))
        draw = ImageDraw.Draw(canvas)
        font = _font(max(12, image.shape[0] // 40))
        scores = self._np(self.scores)
        for poly, text, score in zip(self._np(self.polygons), self.texts, scores):
            draw.polygon([tuple(p) for p in poly.tolist()], outline=LINE_COLOR, width=2)
            if labels:
                label = f"{text} {score:.2f}" if conf else text
                x, y = float(poly[0, 0]), float(poly[0, 1])
                left, top, right, bottom = draw.textbbox((x, y), label, font=font, anchor="lb")
                draw.rectangle((left, top, right, bottom), fill=LINE_COLOR)
                draw.text((x, y), label, fill=(255, 255, 255), font=font, anchor="lb")
        return np.asarray(canvas)

    def to(self, device: str | torch.device) -> TextLines:
        return TextLines(torch.as_tensor(self.polygons).to(device), self.texts,
                         torch.as_tensor(self.scores).to(device), torch.as_tensor(self.det_scores).to(device))

    def numpy(self) -> TextLines:
        return TextLines(self._np(self.polygons), self.texts, self._np(self.scores), self._np(self.det_scores))

    def __len__(self) -> int:
        return len(self.texts)

    def __repr__(self) -> str:
        return f"TextLines(n={len(self.texts)})"


def _font(size: int):  # type: ignore[no-untyped-def]
    """A scalable font when one is installed (DejaVu, Noto CJK draw more of the dictionary), else PIL's default."""
    from PIL import ImageFont

    for name in ("NotoSansCJK-Regular.ttc", "DejaVuSans.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)
