"""Training images resident on the device: the same batches as shipping tiles, and when it happens.

The resident path is the GPU path with ``resident[indices]`` in place of the tiles a worker
copies; here it runs with the resident tensor on the CPU (``cache="gpu"`` on a CPU device with
``gpu_augment=True``) against today's path, and the ``cuda`` test runs both on a GPU.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gloo_ranks import run_two_ranks
from PIL import Image

import libreyolo_ddp
from libreyolo_models import LibreYOLO9
from libreyolo_models.data.augment_draws import AugmentConfig, draw_sample
from libreyolo_models.data.cache_store import CachePlace
from libreyolo_models.data.collate import collate_tiles
from libreyolo_models.data.device_cache import DEVICE_SHARE, plan_residency, upload_images
from libreyolo_models.data.image_cache import open_image_cache
from libreyolo_models.data.split_index import SplitIndex
from libreyolo_models.errors import ConfigError
from libreyolo_models.tasks import TASKS
from libreyolo_models.tasks.detect import render_graph
from libreyolo_models.tasks.detect.pipeline import Batch, TrainPipeline
from libreyolo_models.train import autobatch
from libreyolo_models.train.autobatch import MEMORY_FRACTION, memory_fraction, planned_resident_bytes
from libreyolo_models.train.plan import TrainPlan
from libreyolo_models.train.settings import TrainConfig

IMGSZ = 40
STRONG = AugmentConfig(mosaic=0.6, degrees=20.0, translate=0.2, scale=0.5, shear=6.0,
                       hsv_h=0.05, hsv_s=0.7, hsv_v=0.4, fliplr=0.5)
CUDA = torch.device("cuda", 0)  # only named: plan_residency reads no device when free_bytes is given


@pytest.fixture(autouse=True)
def _private_cache_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))


def noisy_split(folder: Path, n: int = 10, *, broken: int | None = None) -> SplitIndex:
    """Noise images of varied shape, two boxes each; image ``broken`` is not an image at all
    (the cache leaves it out, so the pipeline reads a view whose rows skip a slot)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    paths, labels, sizes = [], [], []
    for i in range(n):
        h, w = int(rng.integers(16, 60)), int(rng.integers(16, 60))
        path = folder / f"n{i:02d}.png"
        if i == broken:
            path.write_bytes(b"not a png")
        else:
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        paths.append(path)
        sizes.append((h, w))
        labels.append(np.array([[0, 0.3, 0.3, 0.4, 0.4], [1, 0.7, 0.6, 0.3, 0.5]], np.float32))
    return SplitIndex("train", paths, labels, sizes, {0: "a", 1: "b"})


def _pipeline(index: SplitIndex, device: torch.device | str, cache: str, workers: int) -> TrainPipeline:
    return TrainPipeline(index, imgsz=IMGSZ, batch_size=4, device=device, augment=STRONG, workers=workers,
                         seed=5, gpu_augment=True, cache=cache)


def _epochs(pipeline: TrainPipeline) -> list[Batch]:
    batches: list[Batch] = []
    for epoch, mosaic in ((0, True), (1, True), (2, False)):
        pipeline.set_epoch(epoch, mosaic=mosaic)
        batches.extend(pipeline)
    return batches


def _assert_bit_identical(shipped: list[Batch], resident: list[Batch]) -> None:
    assert len(shipped) == len(resident) > 0
    for k, (a, b) in enumerate(zip(shipped, resident)):
        assert torch.equal(a.images.cpu(), b.images.cpu()), f"batch {k}: images differ"
        assert torch.equal(a.targets.cpu(), b.targets.cpu()), f"batch {k}: targets differ"
        assert a.paths == b.paths and a.ori_sizes == b.ori_sizes


@pytest.mark.parametrize("workers", [0, 2])
def test_resident_images_give_bit_identical_batches_to_shipped_tiles(tmp_path: Path, workers: int,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    index = noisy_split(tmp_path / "img", broken=3)
    shipped = _pipeline(index, "cpu", "auto", workers)  # auto on the CPU: tiles shipped, as today
    with caplog.at_level(logging.INFO, logger="libreyolo_models.tasks.detect.pipeline"):
        resident = _pipeline(index, "cpu", "gpu", workers)
    assert "image cache on the device: 9 images at 40 px = 0.00 GiB held on cpu (cache='gpu')" in caplog.text
    assert shipped.resident is None
    assert resident.cache.path == shipped.cache.path  # on the host, "gpu" finds the file "auto" built
    assert resident.resident is not None and resident.resident.shape == (9, IMGSZ, IMGSZ, 3)  # broken one left out
    _assert_bit_identical(_epochs(shipped), _epochs(resident))


def test_workers_ship_tile_indices_and_gather_finds_the_same_pixels(tmp_path: Path) -> None:
    index = noisy_split(tmp_path / "img", n=6)
    cache = open_image_cache(index.images, IMGSZ)
    draws = [draw_sample(STRONG, index=i, n_images=6, imgsz=IMGSZ, seed=1, rank=0, epoch=0, mosaic=True)
             for i in range(6)]
    with_pixels = collate_tiles(cache, index.labels, draws, index.images)
    indices_only = collate_tiles(cache, index.labels, draws, index.images, pixels=False)
    assert all(g.tiles is None for g in indices_only.groups)
    shipped_bytes = sum(t.nbytes for g in indices_only.groups for t in (g.cache_rows, g.theta, g.hsv, g.flip, g.positions))
    assert shipped_bytes < 2_000  # vs 6 samples x up to 4 tiles x 40 x 40 x 3 bytes of pixels
    gathered = indices_only.gather(upload_images(cache, torch.device("cpu")))
    for a, b in zip(with_pixels.groups, gathered.groups):
        assert torch.equal(a.cache_rows, b.cache_rows)
        for tile_a, tile_b, (h, w) in zip(a.tiles.flatten(0, 1), b.tiles.flatten(0, 1), a.hw.flatten(0, 1).tolist()):
            assert torch.equal(tile_a[:h, :w], tile_b[:h, :w])  # only the used region is ever read
    assert torch.equal(with_pixels.render(IMGSZ), gathered.render(IMGSZ))
    assert torch.equal(with_pixels.targets, indices_only.targets)


def test_auto_keeps_images_on_a_gpu_only_when_they_fit_in_a_quarter_of_its_free_memory() -> None:
    auto = CachePlace("auto")
    size = 100 * IMGSZ * IMGSZ * 3
    fits = plan_residency(auto, CUDA, gpu_augment=True, n_images=100, imgsz=IMGSZ, free_bytes=4 * size)
    assert fits.resident and fits.nbytes == size and "25% of the 0.0 GiB free on cuda:0" in fits.reason
    too_big = plan_residency(auto, CUDA, gpu_augment=True, n_images=100, imgsz=IMGSZ, free_bytes=4 * size - 1)
    assert not too_big.resident and f"over the {DEVICE_SHARE:.0%}" in too_big.reason and "cache='gpu'" in too_big.reason
    forced = plan_residency(CachePlace("gpu"), CUDA, gpu_augment=True, n_images=100, imgsz=IMGSZ, free_bytes=2 * size)
    assert forced.resident
    for place, device, gpu_augment, why in ((auto, torch.device("cpu"), True, "training on cpu"),
                                            (auto, CUDA, False, "gpu_augment=False"),
                                            (CachePlace("ram"), CUDA, True, "cache='ram'")):
        decision = plan_residency(place, device, gpu_augment=gpu_augment, n_images=100, imgsz=IMGSZ, free_bytes=10**12)
        assert not decision.resident and decision.reason.endswith(f"stay on the host ({why})")


def test_forcing_the_gpu_cache_where_it_cannot_go_names_the_value_and_the_fix() -> None:
    size = 100 * IMGSZ * IMGSZ * 3
    with pytest.raises(ConfigError, match=r"cache='gpu': 100 images at 40 px .* more than is free; use cache='auto'"):
        plan_residency(CachePlace("gpu"), CUDA, gpu_augment=True, n_images=100, imgsz=IMGSZ, free_bytes=size)
    with pytest.raises(ConfigError, match=r"gpu_augment=False renders them in the workers; use gpu_augment=True"):
        plan_residency(CachePlace("gpu"), torch.device("cpu"), gpu_augment=False, n_images=100, imgsz=IMGSZ)
    with pytest.raises(ConfigError, match=r"cache='gpu' .* gpu_augment=False .*; drop one of them"):
        TrainConfig(data="shapes", cache="gpu", gpu_augment=False)  # before any data is read


def test_autobatch_budget_leaves_out_the_resident_images() -> None:
    assert memory_fraction(graphed=False) == pytest.approx(MEMORY_FRACTION)
    assert memory_fraction(graphed=False, resident_share=0.2) == pytest.approx(MEMORY_FRACTION - 0.2)
    assert memory_fraction(graphed=True, resident_share=0.2) == pytest.approx((MEMORY_FRACTION - 0.2) / 1.25)
    with pytest.raises(ConfigError, match=r"take 58% of its memory.*use cache='auto'"):
        memory_fraction(graphed=False, resident_share=0.58)


def test_autobatch_counts_the_training_images_the_pipeline_will_keep_on_the_device(mini_shapes: Path) -> None:
    def planned(task: str, cache: str, device: str = "cpu") -> int:
        cfg = SimpleNamespace(cache=cache, gpu_augment=True, data=str(mini_shapes))
        return planned_resident_bytes(SimpleNamespace(task_spec=TASKS[task]),  # type: ignore[arg-type]
                                      SimpleNamespace(cfg=cfg, imgsz=64), torch.device(device))  # type: ignore[arg-type]

    assert planned("detect", "gpu") == 24 * 64 * 64 * 3  # the 24 training images of mini shapes
    assert planned("detect", "auto") == planned("detect", "ram") == 0  # auto uploads on CUDA only
    assert planned("classify", "gpu") == 0  # its pipeline keeps no resident copy


def test_autobatch_probes_within_what_the_resident_images_leave(monkeypatch: pytest.MonkeyPatch) -> None:
    """An 80 GiB device holding 8 GiB of training images: the step may fill 60% - 10% of it."""
    gib = 2**30
    seen: list[float] = []

    def fake_probe(step, device, fraction=0.6):  # noqa: ANN001, ANN202 - libreyolo_ddp's signature
        seen.append(fraction)
        return 16

    monkeypatch.setattr(libreyolo_ddp, "probe_batch_size", fake_probe)
    monkeypatch.setattr(autobatch, "planned_resident_bytes", lambda model, plan, device: 8 * gib)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=80 * gib))
    devices = SimpleNamespace(type="cuda", torch_device=lambda index: torch.device("cpu"))
    plan = TrainPlan(TrainConfig(data="shapes", batch=-1), devices, 64, {}, False, 1)  # type: ignore[arg-type]
    assert autobatch.resolve_batch(LibreYOLO9(size="t"), plan).global_batch == 16
    assert seen == [pytest.approx(MEMORY_FRACTION - 0.1)]


def test_autobatch_holds_the_batch_renderings_memory_beside_each_probed_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection renders batches on the GPU by default there: each probed step at batch ``b``
    runs beside ``b`` images' worth of the rendering's memory; the CPU path and classify hold none."""
    def per_image(task: str, gpu_augment: bool | str = "auto", device: str = "cuda") -> int:
        plan = SimpleNamespace(cfg=SimpleNamespace(gpu_augment=gpu_augment), imgsz=64)
        return autobatch.rendering_bytes_per_image(SimpleNamespace(task_spec=TASKS[task]),  # type: ignore[arg-type]
                                                   plan, torch.device(device))  # type: ignore[arg-type]

    assert per_image("detect") == render_graph.BYTES_PER_PIXEL * 64 * 64
    assert per_image("detect", gpu_augment=False) == per_image("detect", device="cpu") == 0
    assert per_image("classify") == 0

    held: list[int] = []

    def probe(step, device, fraction):  # noqa: ANN001, ANN202 - libreyolo_ddp's signature
        for b in (2, 3):
            step(b)
        return 3

    monkeypatch.setattr(autobatch, "hold_bytes", lambda nbytes, device: held.append(nbytes))
    monkeypatch.setattr(libreyolo_ddp, "probe_batch_size", probe)
    model = LibreYOLO9(size="t")
    assert autobatch.probe_training_batch(model, 32, torch.device("cpu"), False, held_per_image=1000) == 3
    assert held == [2000, 3000]


@pytest.mark.cuda
def test_the_rendering_memory_autobatch_plans_for_is_what_the_graphs_hold(tmp_path: Path) -> None:
    """``render_graph.BYTES_PER_PIXEL`` against a real pool: mosaics of resident images, 320 px."""
    imgsz, batch = 320, 8
    device = torch.device("cuda", torch.cuda.current_device())
    pipeline = TrainPipeline(noisy_split(tmp_path / "img", n=16), imgsz=imgsz, batch_size=batch, device=device,
                             augment=AugmentConfig(mosaic=1.0), workers=0, seed=0, gpu_augment=True, cache="gpu")
    assert pipeline.resident is not None and pipeline.render_graphs is not None
    graphs = pipeline.render_graphs
    pipeline.set_epoch(0, mosaic=True)
    for _ in pipeline:  # two batches of one structure: the second is captured
        pass
    pipeline.close()
    totals = graphs.totals()
    assert totals.graphs == 1, totals
    planned = render_graph.BYTES_PER_PIXEL * batch * imgsz * imgsz
    assert 0.6 * planned <= totals.pool_bytes <= 1.2 * planned, (totals.pool_bytes, planned)


@pytest.mark.cuda
@pytest.mark.parametrize("workers", [0, 2])
def test_resident_images_on_the_gpu_give_bit_identical_batches(tmp_path: Path, workers: int,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    index = noisy_split(tmp_path / "img", n=12, broken=5)
    device = torch.device("cuda", torch.cuda.current_device())
    with caplog.at_level(logging.INFO, logger="libreyolo_models.tasks.detect.pipeline"):
        shipped = _pipeline(index, device, "ram", workers)  # "ram": never resident
        resident = _pipeline(index, device, "gpu", workers)
        auto = _pipeline(index, device, "auto", 0)  # a few KiB: well under a quarter of free memory
    assert "image cache not on the device: 11 images at 40 px = 0.00 GiB stay on the host (cache='ram')" in caplog.text
    assert f"GiB free on {device} (cache='gpu'), uploaded in" in caplog.text
    assert f"GiB free on {device}, uploaded in" in caplog.text  # auto's line
    assert shipped.resident is None and auto.resident is not None
    assert resident.resident is not None and resident.resident.device == device
    _assert_bit_identical(_epochs(shipped), _epochs(resident))


_RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    import torch, torch.distributed as dist
    from libreyolo_models.tasks.detect.pipeline import AugmentConfig, TrainPipeline
    from libreyolo_models.data.split_index import SplitIndex

    rank, init_file, folder, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    device = "cpu" if sys.argv[5] == "cpu" else f"cuda:{rank}"
    if device != "cpu":
        torch.cuda.set_device(rank)  # as the trainer does on each rank
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    paths = sorted(folder.glob("*.png"))
    index = SplitIndex("train", paths, [np.array([[0, 0.5, 0.5, 0.5, 0.5]], np.float32)] * len(paths),
                       [(40, 30)] * len(paths), {0: "a"})
    epochs = {}
    for cache in ("ram", "gpu"):
        pipeline = TrainPipeline(index, imgsz=16, batch_size=2, device=device, augment=AugmentConfig(degrees=10.0),
                                 workers=0, seed=0, gpu_augment=True, cache=cache)
        pipeline.set_epoch(1, mosaic=True)
        held = None if pipeline.resident is None else [*pipeline.resident.shape, str(pipeline.resident.device)]
        epochs[cache] = ([(b.images.cpu(), b.targets.cpu(), b.paths) for b in pipeline], held)
    (shipped, _), (resident, held) = epochs["ram"], epochs["gpu"]
    same = len(shipped) == len(resident) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(shipped, resident))
    out.joinpath(f"rank{rank}.json").write_text(json.dumps(
        {"seen": [p for b in resident for p in b[2]], "same": same, "held": held}))
    dist.barrier()
    dist.destroy_process_group()
""")


def _each_rank_holds_its_own_copy(tmp_path: Path, device: str) -> None:
    folder = tmp_path / "img"
    folder.mkdir()
    for i in range(8):
        Image.fromarray(np.full((40, 30, 3), 20 * i, np.uint8)).save(folder / f"{i}.png")
    zero, one = run_two_ranks(_RANK_SCRIPT, folder, tmp_path, args=(device,))
    where = ("cpu", "cpu") if device == "cpu" else ("cuda:0", "cuda:1")
    assert (zero["held"], one["held"]) == ([8, 16, 16, 3, where[0]], [8, 16, 16, 3, where[1]])  # the whole split
    assert zero["same"] and one["same"]  # bit-identical to shipping tiles, on each rank
    assert len(zero["seen"]) == len(one["seen"]) == 4 and not set(zero["seen"]) & set(one["seen"])


@pytest.mark.slow
@pytest.mark.solo  # two gloo ranks in subprocesses, like test_pipeline's DDP test (see its note)
def test_each_ddp_rank_holds_its_own_copy_and_keeps_its_shard_and_batches(tmp_path: Path) -> None:
    _each_rank_holds_its_own_copy(tmp_path, "cpu")


@pytest.mark.multigpu
def test_each_gpu_rank_holds_its_own_copy_and_keeps_its_shard_and_batches(tmp_path: Path) -> None:
    _each_rank_holds_its_own_copy(tmp_path, "cuda")
