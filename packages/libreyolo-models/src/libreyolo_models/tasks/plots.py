"""The pictures a run leaves behind: confusion matrices, P / R / F1 / PR curves, the labels
overview and annotated training batches.

Every function writes one PNG or JPEG and returns its path. Figures are built with
``matplotlib.figure.Figure`` (no pyplot state), so plotting from a worker thread or while
another library holds pyplot is safe, and no display is ever needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..layers.boxes import xywh_to_xyxy
from .curves import RECALL_POINTS, THRESHOLDS, ClassCurves
from .drawing import draw_detections, save_grid
from .point.points import Points

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_MAX_LEGEND = 20  # past this many classes, per-class lines stay but only the mean is named


def plot_confusion(matrix: np.ndarray, names: Mapping[int, str], path: Path, *, normalize: bool,
                   background: bool = True) -> Path:
    """``matrix`` (rows true class, columns predicted; with ``background`` the last row and column
    are background) as a heat map with the counts, or row shares when ``normalize``."""
    counts = np.asarray(matrix, dtype=np.float64)
    values = counts
    if normalize:
        totals = counts.sum(axis=1, keepdims=True)
        values = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    n = counts.shape[0]
    labels = [names.get(i, str(i)) for i in range(n - 1 if background else n)] + (["background"] if background else [])
    side = min(max(4.0, 0.55 * n + 2), 16.0)
    fig = _figure(figsize=(side + 1, side))
    ax = fig.add_subplot()
    image = ax.imshow(values, cmap="Blues", vmin=0, vmax=1 if normalize else None)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if n <= 30:  # numbers in the cells stay readable up to about 30 classes
        peak = values.max() if values.size else 0
        for (i, j), v in np.ndenumerate(values):
            if v:
                text = f"{v:.2f}" if normalize else f"{int(v)}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8,
                        color="white" if v > 0.5 * peak else "black")
    ticks = range(n)
    ax.set_xticks(ticks, labels, rotation=90 if n > 8 else 45, ha="right" if n <= 8 else "center", fontsize=8)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title("confusion matrix" + (" (normalised by true class)" if normalize else " (counts)"))
    fig.tight_layout()
    return _save(fig, path)


def plot_curves(curves: Mapping[int, ClassCurves], names: Mapping[int, str], out_dir: Path, *,
                prefix: str = "") -> list[Path]:
    """``PR_curve.png``, ``P_curve.png``, ``R_curve.png`` and ``F1_curve.png`` (after ``prefix``:
    ``BoxPR_curve.png``, ``MaskPR_curve.png``): one thin line per class, the mean over classes thick
    (with its best point named)."""
    paths = []
    panels = (("PR_curve.png", "recall", "precision", RECALL_POINTS, "pr"),
              ("P_curve.png", "confidence", "precision", THRESHOLDS, "precision"),
              ("R_curve.png", "confidence", "recall", THRESHOLDS, "recall"),
              ("F1_curve.png", "confidence", "F1", THRESHOLDS, "f1"))
    for filename, xlabel, ylabel, x, attr in panels:
        fig = _figure(figsize=(7, 5))
        ax = fig.add_subplot()
        few = len(curves) <= _MAX_LEGEND
        for c, cc in curves.items():
            label = f"{names.get(c, str(c))}" + (f" {cc.ap50:.3f}" if attr == "pr" else "")
            ax.plot(x, getattr(cc, attr), linewidth=1, label=label if few else None)
        if curves:
            mean = np.mean([getattr(cc, attr) for cc in curves.values()], axis=0)
            if attr == "pr":
                label = f"all classes {np.mean([cc.ap50 for cc in curves.values()]):.3f} mAP@0.5"
            elif attr == "recall":
                label = "all classes"
            else:
                best = int(np.argmax(mean))
                label = f"all classes {mean[best]:.2f} at {x[best]:.3f}"
            ax.plot(x, mean, linewidth=3, color="navy", label=label)
            ax.legend(fontsize=7, loc="lower left" if attr in ("pr", "recall") else "lower center")
        ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel=xlabel, ylabel=ylabel, title=f"{ylabel}-{xlabel} curve")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(_save(fig, out_dir / f"{prefix}{filename}"))
    return paths


def plot_labels(labels: list[np.ndarray], names: Mapping[int, str], path: Path) -> Path:
    """The training labels at a glance: instances per class, box centres, box sizes (all
    normalised to the image). ``labels``: per image ``[n, 5]`` rows (class, cx, cy, w, h)."""
    rows = np.concatenate([np.asarray(lab, np.float64).reshape(-1, 5) for lab in labels]) if labels else np.zeros((0, 5))
    nc = max(len(names), int(rows[:, 0].max()) + 1 if len(rows) else 1)
    fig = _figure(figsize=(12, 4))
    ax_cls, ax_xy, ax_wh = fig.subplots(1, 3)
    counts = np.bincount(rows[:, 0].astype(np.int64), minlength=nc) if len(rows) else np.zeros(nc, np.int64)
    ax_cls.bar(range(nc), counts, color="steelblue")
    if nc <= 30:
        ax_cls.set_xticks(range(nc), [names.get(i, str(i)) for i in range(nc)], rotation=90 if nc > 8 else 0,
                          fontsize=8)
    ax_cls.set(ylabel="instances", title=f"{len(rows)} boxes in {len(labels)} images")
    ax_xy.hist2d(rows[:, 1], rows[:, 2], bins=50, range=[[0, 1], [0, 1]], cmap="Blues")
    ax_xy.set(xlabel="x centre", ylabel="y centre", title="where boxes are")
    ax_xy.invert_yaxis()
    ax_wh.hist2d(rows[:, 3], rows[:, 4], bins=50, range=[[0, 1], [0, 1]], cmap="Blues")
    ax_wh.set(xlabel="width", ylabel="height", title="box sizes")
    fig.tight_layout()
    return _save(fig, path)


def plot_batch(images: Tensor, targets: Tensor | None, names: Mapping[int, str], path: Path, *,
               max_images: int = 16) -> Path:
    """A grid of the first ``max_images`` of a batch (``float [B, 3, S, S]`` in [0, 1]) with their
    target boxes (``[M, 6]`` rows: image index, class, cx, cy, w, h normalised) or points (``[M, 4]``
    rows: image index, class, x, y normalised) drawn on, as the network sees them after
    augmentation. ``targets`` of other kinds (masks, clean pictures) are skipped."""
    images = images[:max_images].detach().float().cpu()
    b, _, h, w = images.shape
    tiles = []
    rows = targets.detach().float().cpu() if isinstance(targets, Tensor) and targets.ndim == 2 else None
    boxes = rows if rows is not None and rows.shape[-1] == 6 else None
    points = rows if rows is not None and rows.shape[-1] == 4 else None
    scale = torch.tensor([w, h, w, h], dtype=torch.float32)
    for i in range(b):
        tile = (images[i].permute(1, 2, 0).clamp(0, 1) * 255 + 0.5).to(torch.uint8).numpy()
        if boxes is not None:
            rows = boxes[boxes[:, 0] == i]
            det = torch.cat((xywh_to_xyxy(rows[:, 2:6]) * scale, torch.ones(len(rows), 1), rows[:, 1:2]), 1)
            tile = draw_detections(tile, det, dict(names), conf=False, line_width=1)
        if points is not None:
            mine = points[points[:, 0] == i]
            xy = mine[:, 2:4] * torch.tensor([w, h], dtype=torch.float32)
            tile = Points(torch.cat((xy, mine[:, 1:2], torch.ones(len(mine), 1)), 1), (h, w)).plot(
                tile, names, labels=True, conf=False)
        tiles.append(tile)
    return save_grid(tiles, path)


def _figure(**kwargs: Any) -> Figure:
    """A new figure; matplotlib is imported here, on the first plot, not with the package (it
    costs seconds, and a run with ``plots=False`` never needs it)."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
