"""Parse and validate label rows: YOLO ``.txt`` files here, COCO boxes through ``check_rows``.

The rules, one place for both formats:

- A row is ``class cx cy w h`` (normalized centre/size), or a polygon ``class x1 y1 ... xk yk``
  (k >= 3 normalized points; Ultralytics segment labels), reduced to its bounding box.
- Anything that makes the file untrustworthy skips the whole file (its image is not trained on):
  a malformed row (wrong column count, non-numeric or non-finite value, non-integer class), a
  class id outside ``0 .. nc-1``, a coordinate outside [0, 1] by more than ``COORD_TOLERANCE``.
  Dropping only the bad row would turn a real object into background, which teaches the model
  the wrong thing; skipping the image costs one image.
- Fixable things keep the file and are reported as notes: a box reaching past the image edge
  (clipped), a zero-size box (dropped), duplicate rows (dropped). Values within the tolerance of
  [0, 1] are clipped silently: that is float noise from annotation tools, not an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

COORD_TOLERANCE = 1e-3
"""How far a normalized coordinate may stray outside [0, 1] and still be clipped silently."""

_EMPTY = np.zeros((0, 5), dtype=np.float32)


@dataclass(frozen=True)
class LabelCheck:
    """What one label file (or one image's COCO annotations) turned out to hold.

    Attributes:
        rows: ``float32 [n, 5]`` rows (class, cx, cy, w, h), normalized, clipped to [0, 1];
            empty when the file is skipped or holds no boxes.
        error: why the file must be skipped, or None when it is usable.
        notes: fixes applied to a usable file (each a short sentence), shown as one warning.
    """

    rows: np.ndarray
    error: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def is_usable(self) -> bool:
        return self.error is None


def read_label_file(path: Path, nc: int, nc_source: str) -> LabelCheck | None:
    """Read and check one YOLO label file; None when it does not exist (a background image).

    Args:
        path: the ``.txt`` label file.
        nc: number of classes; class ids must be ``0 .. nc-1``.
        nc_source: where ``nc`` came from (a data.yaml path), quoted in the out-of-range message.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:  # permissions, a directory named like a label, I/O errors
        return LabelCheck(_EMPTY, error=f"cannot read label file: {err.strerror or err}")
    try:
        text = raw.decode("utf-8-sig")  # tolerate a BOM from Windows editors
    except UnicodeDecodeError as err:
        return LabelCheck(_EMPTY, error=f"label file is not UTF-8 text (byte {err.start}); "
                                         "save it as plain text rows 'class cx cy w h'")
    return parse_label_text(text, nc, nc_source)


def parse_label_text(text: str, nc: int, nc_source: str) -> LabelCheck:
    """Parse the text of a YOLO label file into checked rows (blank lines are ignored)."""
    rows: list[list[float]] = []
    where: list[str] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        row, error = _parse_fields(fields)
        if error:
            return LabelCheck(_EMPTY, error=f"line {line_no}: {error}")
        rows.append(row)
        where.append(f"line {line_no}")
    if not rows:
        return LabelCheck(_EMPTY)
    return check_rows(np.asarray(rows, dtype=np.float64), nc, nc_source, where)


def _parse_fields(fields: list[str]) -> tuple[list[float], str | None]:
    """One row's fields to ``[class, cx, cy, w, h]``, or an error saying what is wrong."""
    n = len(fields)
    if n == 6:  # what predict's save_txt writes with save_conf=True: not a label
        return [], (f"6 values {' '.join(fields)!r}; expected 5 (class cx cy w h): a sixth column looks like a "
                    "confidence (predict's save_conf=True writes one); drop it to use these as labels")
    if n != 5 and (n < 7 or n % 2 == 0):
        return [], (f"{n} values {' '.join(fields)!r}; expected 5 (class cx cy w h) or a polygon "
                    "(class x1 y1 x2 y2 x3 y3 ...)")
    try:
        values = [float(f) for f in fields]
    except ValueError:
        bad = next(f for f in fields if not _is_float(f))
        return [], f"{bad!r} is not a number (row {' '.join(fields)!r})"
    if not all(math.isfinite(v) for v in values):
        return [], f"non-finite value in row {' '.join(fields)!r}"
    if values[0] != int(values[0]):
        return [], f"class id {fields[0]!r} is not a whole number"
    if n == 5:
        return values, None
    xs, ys = values[1::2], values[2::2]
    for v in xs + ys:  # check points before reducing them, so the message shows the real value
        if not -COORD_TOLERANCE <= v <= 1 + COORD_TOLERANCE:
            return [], f"polygon point {v:g} is outside [0, 1] (row {' '.join(fields)!r})"
    x1, x2 = min(xs), max(xs)
    y1, y2 = min(ys), max(ys)
    return [values[0], (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_rows(rows: np.ndarray, nc: int, nc_source: str, where: Sequence[str]) -> LabelCheck:
    """Validate and tidy ``[n, 5]`` rows of (class, cx, cy, w, h) in normalized units.

    Args:
        rows: float rows; the class column must already hold whole numbers.
        nc: number of classes; ids must be ``0 .. nc-1``.
        nc_source: where ``nc`` came from, for the out-of-range message.
        where: per row, how to name it to the user (``"line 3"``, ``"annotation 812"``).

    Returns:
        The usable rows as float32, or an error (skip the file), plus notes for fixes applied.
    """
    cls = rows[:, 0]
    bad_cls = np.flatnonzero((cls < 0) | (cls >= nc))
    if bad_cls.size:
        i = int(bad_cls[0])
        more = f" (and {bad_cls.size - 1} more rows)" if bad_cls.size > 1 else ""
        return LabelCheck(_EMPTY, error=(
            f"{where[i]}: class id {int(cls[i])} is out of range; valid ids are 0..{nc - 1} "
            f"(nc={nc} from {nc_source}){more}"))
    xywh = rows[:, 1:5]
    outside = np.flatnonzero(((xywh < -COORD_TOLERANCE) | (xywh > 1 + COORD_TOLERANCE)).any(axis=1))
    if outside.size:
        i = int(outside[0])
        values = " ".join(f"{v:g}" for v in xywh[i])
        more = f" (and {outside.size - 1} more rows)" if outside.size > 1 else ""
        return LabelCheck(_EMPTY, error=(
            f"{where[i]}: coordinates {values} are outside [0, 1]; YOLO labels are normalized "
            f"'class cx cy w h' (divide pixels by the image width/height){more}"))
    return _tidy(rows, where)


def _tidy(rows: np.ndarray, where: Sequence[str]) -> LabelCheck:
    """Clip boxes to the image, drop zero-size and duplicate rows; say what was changed."""
    notes: list[str] = []
    xywh = np.clip(rows[:, 1:5], 0.0, 1.0)
    lo = xywh[:, :2] - xywh[:, 2:] / 2
    hi = xywh[:, :2] + xywh[:, 2:] / 2
    overshoot = np.maximum(np.maximum(-lo, hi - 1.0).max(axis=1), 0.0)
    lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    clipped = np.flatnonzero(overshoot > COORD_TOLERANCE)
    if clipped.size:
        notes.append(f"{_count(clipped.size, 'box')} reaching past the image edge clipped "
                     f"(first: {where[int(clipped[0])]}, by {overshoot[clipped].max():.3g})")
    tidy = np.concatenate([rows[:, :1], (lo + hi) / 2, hi - lo], axis=1).astype(np.float32)
    zero = np.flatnonzero((tidy[:, 3] <= 0) | (tidy[:, 4] <= 0))
    if zero.size:
        notes.append(f"{_count(zero.size, 'zero-size box')} dropped (first: {where[int(zero[0])]})")
        tidy = np.delete(tidy, zero, axis=0)
    _, first = np.unique(tidy, axis=0, return_index=True)
    if first.size < len(tidy):
        notes.append(f"{_count(len(tidy) - first.size, 'duplicate row')} dropped")
        tidy = tidy[np.sort(first)]
    return LabelCheck(tidy, notes=tuple(notes))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith("x") else f"{n} {noun}s"
