"""The YOLOv7 detection network (official tiny / base / X graphs, IDetect head): tensors in, tensors out.

State-dict keys are the official checkpoints' (``model.<layer>.<...>``, the training configs'
layout: ``IDetect`` with YOLOR implicit layers, RepConv in branch form for the base size):
``tests/data/yolo7/manifest-yolo7-*.tsv`` lists them, derived as ``docs/families/yolo7.md`` says.
The official input is RGB in [0, 1] too (no mean/std), so ``forward`` is the official eval
forward plus the decoded ``predictions`` the shared NMS reads; no ``upstream_outputs`` is needed.

No NMS, no ``.item()``, no data-dependent shapes: this module is what a CUDA graph captures.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .blocks import IDetect
from .graphs import GRAPHS, STRIDES

SIZES = tuple(GRAPHS)


def anchors_in_grid_units(size: str) -> Tensor:
    """``[3, 3, 2]`` the size's anchors divided by their level's stride (the head's ``anchors``;
    the loss uses these defaults, so anchors changed in a checkpoint would not reach it)."""
    anchors = torch.tensor(GRAPHS[size][1], dtype=torch.float32).view(len(STRIDES), -1, 2)
    return anchors / torch.tensor(STRIDES, dtype=torch.float32).view(-1, 1, 1)


class Yolo7Net(nn.Module):
    """YOLOv7 detector network.

    Input: ``float [B, 3, H, W]``, RGB in [0, 1], H and W multiples of 32.
    Output dict (same in train and eval mode):
        ``predictions`` ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then objectness x class
        probability per class; A = 3 anchors x cells per level, anchor-major, levels 8, 16, 32.
        ``raw_outputs`` list of ``[B, 3, H/s, W/s, 5 + nc]`` raw logits; what the loss reads.
        ``decoded`` ``[B, A, 5 + nc]``: the official eval output (cx, cy, w, h pixels, objectness,
        class probabilities).
    """

    def __init__(self, size: str = "base", nc: int = 80) -> None:
        super().__init__()
        if size not in GRAPHS:
            raise ValueError(f"unknown YOLOv7 size {size!r}; known sizes: {', '.join(GRAPHS)}")
        build, anchors = GRAPHS[size]
        graph, heads = build()
        self.size, self.nc = size, nc
        self._sources = graph.sources
        self._heads = heads
        detect = IDetect(nc, anchors, STRIDES, tuple(graph.channels[h] for h in heads))
        detect.initialize_biases()
        # One flat list, as the official ``Model.model``: the index of each layer is its key.
        self.model = nn.ModuleList([*graph.layers, detect])
        self._keep = sorted({s for srcs in graph.sources for s in srcs if s >= 0} | set(heads))

    @property
    def detect(self) -> IDetect:
        head = self.model[-1]
        assert isinstance(head, IDetect)  # built last in __init__
        return head

    def features(self, x: Tensor) -> list[Tensor]:
        """Run the layer graph; the three maps the head reads (strides 8, 16, 32)."""
        saved: dict[int, Tensor] = {}
        keep = self._keep
        for i, (layer, srcs) in enumerate(zip(self.model[:-1], self._sources)):
            if len(srcs) > 1:
                x = layer([saved[s] for s in srcs])
            else:
                x = layer(x if srcs[0] in (-1, i - 1) else saved[srcs[0]])
            if i in keep:
                saved[i] = x
        return [saved[h] for h in self._heads]

    def raw_outputs(self, x: Tensor) -> list[Tensor]:
        """The training seam: per level ``[B, 3, H, W, 5 + nc]`` raw logits."""
        return self.detect.raw_maps(self.features(x))

    def forward(self, x: Tensor) -> dict[str, Tensor | list[Tensor]]:
        raw = self.raw_outputs(x)
        decoded = self.detect.decode(raw)
        half = decoded[..., 2:4] / 2
        boxes = torch.cat((decoded[..., :2] - half, decoded[..., :2] + half), -1)
        scores = decoded[..., 4:5] * decoded[..., 5:]
        predictions = torch.cat((boxes, scores), -1).transpose(1, 2)
        return {"predictions": predictions, "raw_outputs": raw, "decoded": decoded}
