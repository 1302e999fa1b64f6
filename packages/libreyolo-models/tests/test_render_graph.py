"""The GPU path's rendering replayed from CUDA graphs: the same bytes as the eager rendering.

On the CPU the runner renders eagerly (CUDA graphs need CUDA tensors), which still runs the
graph's function: the flattened inputs, the flags carried by the marker's shape and the groups
rebuilt from them must give exactly ``TileBatch.render``. The ``cuda`` test replays real graphs
inside the training pipeline against the eager pipeline, batch by batch.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from test_device_cache import (  # _private_cache_dirs: its autouse fixture, active here too
    IMGSZ,
    STRONG,
    _assert_bit_identical,
    _epochs,
    _private_cache_dirs,  # noqa: F401
    noisy_split,
)

import libreyolo_models.tasks.detect.pipeline as pipeline_module
from libreyolo_models.data.augment_draws import AugmentConfig, draw_sample
from libreyolo_models.data.collate import collate_tiles
from libreyolo_models.data.device_cache import upload_images
from libreyolo_models.data.image_cache import open_image_cache
from libreyolo_models.tasks.detect import render_graph
from libreyolo_models.tasks.detect.pipeline import TrainPipeline
from libreyolo_models.tasks.detect.render_graph import RenderGraphs, render_eagerly


@pytest.mark.parametrize("resident", [False, True])
def test_the_graphs_function_renders_what_the_batch_renders(tmp_path: Path, resident: bool) -> None:
    index = noisy_split(tmp_path / "img", n=8)
    cache = open_image_cache(index.images, IMGSZ)
    images = upload_images(cache, torch.device("cpu")) if resident else None
    graphs = RenderGraphs(IMGSZ, images)
    seen_flags = set()
    for seed, augment in enumerate((STRONG, AugmentConfig(mosaic=0.5, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, fliplr=0.0),
                                    AugmentConfig(mosaic=1.0, fliplr=1.0), AugmentConfig(mosaic=0.0))):
        draws = [draw_sample(augment, index=i, n_images=8, imgsz=IMGSZ, seed=seed, rank=0, epoch=0, mosaic=True)
                 for i in range(8)]
        batch = collate_tiles(cache, index.labels, draws, index.images, pixels=not resident)
        seen_flags.add(tuple((g.cache_rows.shape[1], g.has_hsv, g.has_flip) for g in batch.groups))
        assert torch.equal(graphs(batch), render_eagerly(batch, IMGSZ, images))
    assert len(seen_flags) == 4  # mixed groups, colour and flip off, every image flipped, letterbox only
    info = graphs.info()
    assert info.graphs == () and info.eager_calls == 4  # on the CPU: the function runs eagerly
    assert graphs.totals() == render_graph.RenderTotals(graphs=0, replays=0, eager_calls=4, pool_bytes=0)


def test_a_batch_of_indices_without_resident_images_is_refused(tmp_path: Path) -> None:
    index = noisy_split(tmp_path / "img", n=4)
    cache = open_image_cache(index.images, IMGSZ)
    draws = [draw_sample(STRONG, index=i, n_images=4, imgsz=IMGSZ, seed=0, rank=0, epoch=0, mosaic=True)
             for i in range(4)]
    with pytest.raises(ValueError, match="tile indices only"):
        RenderGraphs(IMGSZ, None)(collate_tiles(cache, index.labels, draws, index.images, pixels=False))


def test_only_cuda_pipelines_render_from_graphs(tmp_path: Path) -> None:
    assert render_graph.wants_render_graphs(torch.device("cuda", 0))
    assert not render_graph.wants_render_graphs(torch.device("cpu"))
    pipeline = TrainPipeline(noisy_split(tmp_path / "img", n=4), imgsz=IMGSZ, batch_size=2, device="cpu",
                             augment=STRONG, workers=0, seed=0, gpu_augment=True)
    assert pipeline.render_graphs is None


@pytest.mark.cuda
@pytest.mark.parametrize("cache", ["gpu", "ram"])
def test_graphed_rendering_gives_the_eager_pipelines_batches(tmp_path: Path, cache: str, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Mosaic always on (and every image flipped: one structure per canvas, replayed from its
    second batch on) and mixed (many structures: up to four graphs, the rest eager); images
    resident on the GPU and shipped; mosaic closing for the last epoch."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    index = noisy_split(tmp_path / "img", n=40)
    device = torch.device("cuda", torch.cuda.current_device())
    for augment in (AugmentConfig(mosaic=1.0, degrees=20.0, translate=0.2, scale=0.5, shear=6.0, hsv_h=0.05,
                                  hsv_s=0.7, hsv_v=0.4, fliplr=1.0), STRONG):
        def pipeline(graphs: bool, augment: AugmentConfig = augment) -> TrainPipeline:
            monkeypatch.setattr(pipeline_module, "wants_render_graphs", lambda device: graphs)
            return TrainPipeline(index, imgsz=IMGSZ, batch_size=4, device=device, augment=augment, workers=2,
                                 seed=5, gpu_augment=True, cache=cache)

        graphed, eager = pipeline(True), pipeline(False)
        assert graphed.render_graphs is not None and eager.render_graphs is None
        batches = _epochs(graphed)
        _assert_bit_identical(batches, _epochs(eager))
        info = graphed.render_graphs.info()
        # Mosaic closes for the third epoch: the graphs are dropped (one invalidation) and its ten
        # letterboxed batches get graphs of their own.
        assert info.invalidations == 1 and len(info.graphs) >= 1 and info.graphs[0].replays > 0, info
        if augment.mosaic == 1.0:  # every image flipped: one structure an epoch, replayed from its second batch
            assert len(info.graphs) == 1 and info.graphs[0].replays == 9 and info.eager_calls == 2, info
        graphs = graphed.render_graphs
        with caplog.at_level(logging.INFO, logger="libreyolo_models.tasks.detect.pipeline"):
            graphed.close()
        assert f"{len(batches) - graphs.totals().eager_calls} batches replayed" in caplog.text
        assert graphed.render_graphs is None
        totals = graphs.totals()  # the graphs dropped when mosaic closed and at close() still count
        assert totals.replays + totals.eager_calls == len(batches) and totals.graphs > len(info.graphs), totals
        assert totals.pool_bytes > 0


def test_the_graphs_hold_the_resident_images_no_longer_than_their_owner(tmp_path: Path) -> None:
    """No reference cycle: dropping the graphs frees what they read without waiting for the collector."""
    import gc
    import weakref

    resident = upload_images(open_image_cache(noisy_split(tmp_path / "img", n=4).images, IMGSZ), torch.device("cpu"))
    seen = weakref.ref(resident)
    graphs = RenderGraphs(IMGSZ, resident)
    del resident
    gc.disable()
    try:
        del graphs
        assert seen() is None
    finally:
        gc.enable()


def test_closing_mosaic_restarts_the_graph_count_and_close_frees_the_pipeline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """On the CPU the runner renders eagerly, but the pipeline's bookkeeping is the CUDA one's."""
    monkeypatch.setattr(pipeline_module, "wants_render_graphs", lambda device: True)
    pipeline = TrainPipeline(noisy_split(tmp_path / "img", n=4), imgsz=IMGSZ, batch_size=2, device="cpu",
                             augment=STRONG, workers=0, seed=0, gpu_augment=True, cache="gpu")
    graphs = pipeline.render_graphs
    assert graphs is not None
    resets: list[str] = []
    monkeypatch.setattr(graphs.runner, "invalidate", resets.append)
    for epoch, mosaic in enumerate((True, True, False)):
        pipeline.set_epoch(epoch, mosaic=mosaic)
        assert len(list(pipeline)) == 2
    assert resets == ["mosaic closes at epoch 2: new batch structures"]
    assert pipeline.resident is not None
    with caplog.at_level(logging.INFO, logger="libreyolo_models.tasks.detect.pipeline"):
        pipeline.close()
    assert pipeline.render_graphs is None and pipeline.resident is None
    assert "batch rendering: 0 CUDA graph(s), 0 batches replayed, 6 rendered eagerly, pool 0.00 GiB" in caplog.text
