"""The GPU path's batch rendering replayed from a CUDA graph: the same kernels, one replay.

Rendering a batch on the device (tile gathers, the warp's sampling grid and ``grid_sample``,
HSV's elementwise passes, the flip) issues about a hundred small kernels from the training
loop's thread, and an eager training step is bound by that thread's launching. Their shapes
depend only on the batch's structure (each group's size and tile count, which colour and flip
steps run), which repeats batch after batch, so ``libreyolo_cudagraph.GraphRunner`` captures one
graph per structure the second time it is seen and replays it; the draws, tile indices (or tiles)
and positions are copied into the graph's static inputs first. The replay runs the same kernels
on the same values as :meth:`~libreyolo_models.data.collate.TileBatch.render`, so the batches are
the same bytes (a ``cuda`` test compares them).

At most :data:`MAX_GRAPHS` structures get a graph (a mosaic probability between 0 and 1 mixes
group sizes from batch to batch); the others render eagerly, and closing mosaic starts the count
afresh (:meth:`RenderGraphs.reset`). The graphs share one memory pool, held until the pipeline
closes (``TrainPipeline.close``).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch import Tensor

from libreyolo_cudagraph import GraphInfo, GraphRunner, RunnerInfo

from ...data.collate import TileBatch, TileGroup, render_groups

MAX_GRAPHS = 4
"""Batch structures with a graph of their own; later new structures render eagerly."""

BYTES_PER_PIXEL = 105
"""Device memory the rendering holds beside the training step, per pixel of a batch image.

The graphs' pool (or, rendering eagerly, the side stream's cached blocks, which the step's
stream does not reuse) at its largest: mosaic samples gathered from resident images, the 2S
canvas in uint8 and float32, the placement's index, the sampling grid, HSV's temporaries.
``tools/probe_render.py`` measured 1.28 GiB for 32 mosaics at 640 px (2026-12-02, H200): 105
bytes a pixel. Autobatch plans around it; a ``cuda`` test checks it against a real pool."""

_PER_GROUP = 7  # positions, cache rows or tiles, offsets, hw, theta, hsv, flip


@dataclasses.dataclass(frozen=True)
class RenderTotals:
    """A pipeline's rendering graphs over its whole life, the ones dropped by a reset or
    released at the end included (a runner's own info forgets those).

    Attributes:
        graphs: graphs captured.
        replays: batches rendered by a replay.
        eager_calls: batches rendered eagerly (first sight of a structure, or no slot left).
        pool_bytes: the largest memory pool the graphs held at one time.
    """

    graphs: int
    replays: int
    eager_calls: int
    pool_bytes: int


def wants_render_graphs(device: torch.device) -> bool:
    """Whether a pipeline on ``device`` replays its rendering from graphs: on CUDA devices.

    A function, so that a benchmark can turn the graphs off to measure what they save.
    """
    return device.type == "cuda"


class RenderGraphs:
    """``batch -> float32 [B, 3, S, S]`` pixels in [0, 255], as ``TileBatch.render`` (after
    ``TileBatch.gather`` when ``resident`` is given) computes them, replayed from CUDA graphs.

    Args:
        imgsz: output side ``S``.
        resident: ``uint8 [N, S, S, 3]`` the split's images on the device when the workers ship
            tile indices only (the graph gathers from it); None when they ship the tiles.
    """

    def __init__(self, imgsz: int, resident: Tensor | None) -> None:
        self.imgsz, self.resident = imgsz, resident
        self._markers: dict[tuple[torch.device, int], Tensor] = {}
        # A function of its own, not a bound method: no reference cycle keeps the runner's pool
        # (and the resident images it reads) alive past the pipeline until a full collection.
        self.runner = GraphRunner(functools.partial(_render_flat, imgsz, resident), mode="auto",
                                  max_graphs=MAX_GRAPHS, evict=False, copy_outputs=False, name="batch rendering")
        self._dropped: list[GraphInfo] = []
        self._pool_bytes = 0

    def __call__(self, batch: TileBatch) -> Tensor:
        """Render ``batch`` (already on the device, :meth:`TileBatch.to`).

        The result is the graph's own output buffer, valid until the next call: read it (the
        pipeline divides it by 255 into a tensor of its own) before rendering the next batch.
        """
        flat: list[Tensor] = []
        flags = 0
        for i, group in enumerate(batch.groups):
            pixels = group.cache_rows if self.resident is not None else group.tiles
            if pixels is None:
                raise ValueError("this batch carries tile indices only, but no resident images were given")
            flat += [group.positions, pixels, group.offsets, group.hw, group.theta, group.hsv, group.flip]
            flags |= (int(group.has_hsv) | int(group.has_flip) << 1) << (2 * i)
        flat.append(self._marker(batch.groups[0].theta.device, flags))
        return self.runner(*flat)

    def info(self) -> RunnerInfo:
        """The graphs held now, their replays, and eager calls so far (see ``GraphRunner.info``)."""
        return self.runner.info()

    def totals(self) -> RenderTotals:
        """Graphs, replays, eager calls and pool over the pipeline's life (see :class:`RenderTotals`)."""
        info = self._keep_tally()
        graphs = [*self._dropped, *info.graphs]
        return RenderTotals(len(graphs), sum(g.replays for g in graphs), info.eager_calls, self._pool_bytes)

    def release(self) -> None:
        """Free the graphs and their memory pool."""
        self._dropped += self._keep_tally().graphs
        self.runner.release()

    def reset(self, reason: str) -> None:
        """Drop every graph (their pool stays, for the next captures): the batch structures change,
        e.g. when mosaic closes, and the new ones should not find the graph slots taken."""
        self._dropped += self._keep_tally().graphs
        self.runner.invalidate(reason)

    def _keep_tally(self) -> RunnerInfo:
        info = self.runner.info()
        self._pool_bytes = max(self._pool_bytes, sum(g.pool_bytes for g in info.graphs))
        return info

    def _marker(self, device: torch.device, flags: int) -> Tensor:
        # The colour and flip steps run or not per group; the graph must be keyed by that, and a
        # GraphRunner keys by tensor shapes: an empty tensor whose width carries the flags.
        key = (device, flags)
        if key not in self._markers:
            self._markers[key] = torch.empty((0, flags), device=device)
        return self._markers[key]


def _render_flat(imgsz: int, resident: Tensor | None, *flat: Tensor) -> Tensor:
    """What a graph captures: the groups rebuilt from :meth:`RenderGraphs.__call__`'s flat inputs,
    gathered from ``resident`` when given, rendered by ``collate.render_groups``."""
    flags = flat[-1].shape[1]
    groups: list[TileGroup] = []
    for i in range(0, len(flat) - 1, _PER_GROUP):
        positions, pixels, offsets, hw, theta, hsv, flip = flat[i:i + _PER_GROUP]
        bits = flags >> (2 * (i // _PER_GROUP))
        tiles = resident[pixels] if resident is not None else pixels
        groups.append(TileGroup(
            positions=positions, cache_rows=pixels, tiles=tiles, offsets=offsets, hw=hw,
            canvas=2 * imgsz if pixels.shape[1] == 4 else imgsz, theta=theta, hsv=hsv, flip=flip,
            has_hsv=bool(bits & 1), has_flip=bool(bits & 2)))
    return render_groups(groups, sum(len(g.positions) for g in groups), imgsz)


def render_eagerly(batch: TileBatch, imgsz: int, resident: Tensor | None) -> Tensor:
    """What :class:`RenderGraphs` replays, without graphs: gather (when resident), then render."""
    if resident is not None:
        batch = batch.gather(resident)
    return batch.render(imgsz)

