"""``Results.masks`` of ``prompt-segment``: per prompt, its mask(s) at the original size and their
predicted IoU, with the decoder's low-resolution logits kept for refinement or soft masks."""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import Tensor

from ...contract.prompts import PromptImage, logits_to_picture
from ..drawing import class_color

OVERLAY_ALPHA = 0.45


def _numpy(data: Tensor | np.ndarray) -> np.ndarray:
    return data if isinstance(data, np.ndarray) else data.detach().cpu().numpy()


class PromptMasks:
    """Masks of one picture's prompts (a ``ResultContent``).

    ``data``: ``bool [P, C, H, W]``, P prompts, C masks each (3 with ``multimask_output``, else 1),
    over the original picture; ``scores``: ``float [P, C]``, the predicted IoU of each mask;
    ``logits``: ``float [P, C, 256, 256]`` (published size), the decoder's logits over the padded
    square input (upstream's ``low_res_masks``); ``full_logits()`` resizes them to the picture.
    Automatic masks (predict without prompts): P masks of one each, best predicted IoU first, and
    ``points``: ``float [P, 2]``, the grid point (original pixels) each came from; None otherwise.
    """

    csv_columns: tuple[str, ...] = ("prompt", "mask", "score", "area", "x1", "y1", "x2", "y2")

    def __init__(self, data: Tensor | np.ndarray, scores: Tensor | np.ndarray, logits: Tensor | np.ndarray,
                 image: PromptImage, *, points: Tensor | np.ndarray | None = None) -> None:
        self.data = cast(Tensor, data)
        self.scores = cast(Tensor, scores)
        self.logits = cast(Tensor, logits)
        self.image = image
        self.points = cast(Tensor | None, points)

    @property
    def automatic(self) -> bool:
        """Masks of everything found (no prompts given), rather than one set per prompt."""
        return self.points is not None

    @property
    def orig_shape(self) -> tuple[int, int]:
        return int(self.data.shape[-2]), int(self.data.shape[-1])

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def best(self) -> np.ndarray:
        """``bool [P, H, W]``: per prompt its highest-scoring mask."""
        data, scores = _numpy(self.data), _numpy(self.scores)
        return data[np.arange(len(self)), scores.argmax(axis=1)]

    def best_logits(self) -> Tensor:
        """``float [P, 1, 256, 256]``: each prompt's best mask's low-resolution logits, what
        ``predict(mask_input=...)`` takes to refine it (upstream's ``logits[np.argmax(scores)]``)."""
        logits, scores = torch.as_tensor(self.logits), torch.as_tensor(self.scores)
        best = scores.argmax(dim=1)
        return logits[torch.arange(len(best)), best][:, None]

    def full_logits(self) -> Tensor:
        """``float [P, C, H, W]`` logits over the original picture (the masks are these > 0)."""
        return logits_to_picture(torch.as_tensor(self.logits), self.image)

    def rows(self, names: dict[int, str]) -> list[dict[str, object]]:
        """One row per mask: its prompt, index, score, pixel area and bounding box (empty: zeros)."""
        data, scores = _numpy(self.data), _numpy(self.scores)
        out: list[dict[str, object]] = []
        for p in range(data.shape[0]):
            for c in range(data.shape[1]):
                ys, xs = np.nonzero(data[p, c])
                box = [float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1] if len(xs) else [0.0] * 4
                out.append({"prompt": p, "mask": c, "score": round(float(scores[p, c]), 5), "area": int(len(xs)),
                            **dict(zip(("x1", "y1", "x2", "y2"), box))})
        return out

    def summary(self, names: dict[int, str]) -> str:
        if self.automatic:
            return f"{len(self)} masks (automatic)" if len(self) else "no masks (automatic)"
        if not len(self):
            return "no prompts"
        scores = _numpy(self.scores)
        per = f"{scores.shape[1]} masks each" if scores.shape[1] > 1 else "1 mask each"
        return f"{len(self)} prompt(s), {per}, best scores " + ", ".join(f"{s:.2f}" for s in scores.max(axis=1))

    def plot(self, image: np.ndarray, names: dict[int, str], *, labels: bool, conf: bool) -> np.ndarray:
        """``image`` with each prompt's best mask tinted in a colour of its own (automatic masks:
        the largest first, so that smaller ones stay visible on top)."""
        out = image.astype(np.float32)
        best = self.best()
        order = np.argsort(-best.sum(axis=(1, 2)), kind="stable") if self.automatic else range(len(best))
        for p in order:
            mask = best[p]
            colour = np.asarray(class_color(p), dtype=np.float32)
            out[mask] = out[mask] * (1 - OVERLAY_ALPHA) + colour * OVERLAY_ALPHA
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)

    def to(self, device: str | torch.device) -> PromptMasks:
        def move(t: Tensor | np.ndarray) -> Tensor:
            return torch.as_tensor(t).to(device)

        return PromptMasks(move(self.data), move(self.scores), move(self.logits), self.image,
                           points=None if self.points is None else move(self.points))

    def cpu(self) -> PromptMasks:
        return self.to("cpu")

    def numpy(self) -> PromptMasks:
        return PromptMasks(_numpy(self.data), _numpy(self.scores), _numpy(self.logits), self.image,
                           points=None if self.points is None else _numpy(self.points))

    def __repr__(self) -> str:
        p, c, h, w = (int(s) for s in self.data.shape)
        if self.automatic:
            return f"PromptMasks(automatic, masks={p}, height={h}, width={w})"
        return f"PromptMasks(prompts={p}, masks_per_prompt={c}, height={h}, width={w})"
