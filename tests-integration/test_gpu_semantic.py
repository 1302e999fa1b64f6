"""SegFormer and the semantic task on a real GPU: graphed eval predict equals eager, parity of the
inference seam, a training step whose only graphed-vs-eager differences are its own random draws,
device augmentation equal to the worker path, and two-GPU training.

The predict test does not rely on the declarations: it runs a verified copy of the family
registered under another name (same code, one flag flipped).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO, LossContext, register_family, unregister_family
from libreyolo_models.zoo.registry import get_family

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def mini_seg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from libreyolo_models.tasks.semantic.shapes_seg import generate_shapes_seg

    root = tmp_path_factory.mktemp("gpu-mini-shapes-seg")
    generate_shapes_seg(root, split_sizes={"train": 16, "val": 4})
    return root / "data.yaml"


@pytest.fixture
def verified() -> Iterator[str]:
    spec = get_family("segformer")
    decl = dataclasses.replace(spec.task("semantic"), inference_capture=True)
    copy = dataclasses.replace(spec, name="segformer_verified", weight_prefix="LibreSegFormerVerified",
                               tasks={"semantic": decl})
    register_family(copy)
    try:
        yield copy.name
    finally:
        unregister_family(copy.name)


def test_graphed_eval_predict_equals_eager(verified: str, mini_seg: Path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO(family=verified, size="b0", nc=6, imgsz=256).to(0)
    images = sorted((mini_seg.parent / "images" / "val").glob("*.jpg"))
    eager = model(images, batch=2)
    first = model(images, batch=2, cuda_graph=True)   # captures
    second = model(images, batch=2, cuda_graph=True)  # replays
    for a, b, c in zip(eager, first, second):
        assert torch.equal(a.masks.data, b.masks.data) and torch.equal(a.masks.data, c.masks.data)
    info = model.graph_info()
    assert info["supported"] and len(info["graphs"]) == 1 and info["graphs"][0]["replays"] >= 1


def test_unverified_segformer_refuses_graphed_predict_naming_itself() -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml", nc=3).to(0)
    if model.spec.task("semantic").inference_capture:
        pytest.skip("SegFormer is declared verified now")
    with pytest.raises(NotImplementedError, match=r"SegFormer \(segformer, semantic\) is not verified"):
        model(np.zeros((64, 64, 3), dtype=np.uint8), cuda_graph=True)


@pytest.mark.parametrize("size", ["b0", "b2"])
def test_inference_seam_is_bitwise_in_fp32_and_fp16(size: str) -> None:
    from libreyolo_cudagraph import contrasting_probes, verify_parity

    torch.manual_seed(0)
    model = LibreYOLO(family="segformer", size=size, nc=19, imgsz=512).to(0).eval()
    for dtype in (torch.float32, torch.float16):
        model.net.to(dtype)
        probe_a, probe_b = contrasting_probes((1, 3, 512, 512), dtype=dtype, device=torch.device("cuda"))
        with torch.inference_mode():
            report = verify_parity(model.inference_forward, probe_a, probe_b, watch=model.net, name=f"{size} {dtype}")
        assert report.ok, report.summary()


def _train_report(stochastic: bool):  # noqa: ANN202
    from libreyolo_cudagraph import compare_train_step
    from libreyolo_models.layers.drop_path import DropPath

    owner = LibreYOLO(family="segformer", size="b0", nc=19, imgsz=256)
    masks = owner.family.sample_targets(4, 256, torch.Generator().manual_seed(7)).cuda()
    context = LossContext(gains={"ce": 1.0}, global_batch=4)

    def make_model():  # noqa: ANN202
        module = LibreYOLO(family="segformer", size="b0", nc=19, imgsz=256).training_module()
        if not stochastic:
            for m in module.modules():
                if isinstance(m, DropPath):
                    m.rate = 0.0
                elif isinstance(m, torch.nn.Dropout2d):
                    m.p = 0.0
        return module

    # Without random draws the step runs the most reproducible kernels there are (math attention,
    # deterministic cuDNN): less accumulation-order noise to tell apart from a graph's mismatch.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with contextlib.ExitStack() as stack:
        if not stochastic:
            stack.enter_context(sdpa_kernel(SDPBackend.MATH))
            stack.enter_context(torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True))
        return compare_train_step(make_model, lambda: (torch.rand(4, 3, 256, 256),),
                                  lambda out, inputs: owner.family.compute_loss(out, masks, context).total,
                                  device="cuda", autocast_dtype=torch.float16)


def test_training_step_differs_from_eager_only_by_its_own_random_draws() -> None:
    """Drop path and dropout draw from the graph's own Philox stream, so the graphed step may differ
    from eager, but only where the tool can explain it (the graph's own draws, or noise that two
    eager runs show too), never as a mismatch; with the draws off, the same holds and the loss
    matches. The split between own-rng and eager-noise is not asserted: where eager itself is not
    reproducible (attention backward under autocast on torch 2.11's H200 build), a tensor that also
    differs with another seed can land in either class.

    Without draws, SegFormer's backward is still not reproducible even on math attention and
    deterministic cuDNN (the decode head's bilinear upsampling accumulates its gradient with
    atomics): in one run 151 of 189 gradients differed between two eager runs with other seeds.
    A tensor whose two eager reruns happen to agree is then classed a mismatch when the graph's
    run lands elsewhere; three GPU runs showed such tensors (4 of a block's spatial-reduction
    conv and norm, 1e-6 to 5e-5 apart). So the run without draws holds the loss and buffers to
    bitwise equality and bounds the gradients' unexplained differences by ``GRAD_NOISE``."""
    report = _train_report(stochastic=True)
    assert report.graphed and report.ok, report.summary()
    grads = report.counts("grad")
    assert grads["mismatch"] == 0 and grads["own-rng"] + grads["eager-noise"] > 0, report.summary()
    quiet = _train_report(stochastic=False)
    assert quiet.graphed, quiet.summary()
    assert quiet.counts("loss")["mismatch"] == 0 and quiet.counts("buffer")["mismatch"] == 0, quiet.summary()
    unexplained = [v for v in quiet.verdicts if v.kind == "grad" and v.verdict == "mismatch"]
    assert all(v.max_abs_diff <= GRAD_NOISE for v in unexplained), quiet.summary()


GRAD_NOISE = 1e-4
"""Largest gradient difference the no-draw run may leave unexplained (seen: up to 5e-5)."""


def test_device_augmentation_equals_the_worker_path() -> None:
    from libreyolo_models.data.augment_draws import AugmentConfig
    from libreyolo_models.tasks.semantic.augment import draw_mask_params, render_pairs

    torch.manual_seed(0)
    slots = torch.randint(0, 256, (8, 96, 96, 3), dtype=torch.uint8)
    masks = torch.randint(0, 6, (8, 96, 96), dtype=torch.uint8)
    hw = torch.tensor([[96, 72], [60, 96]] * 4)
    cfg = AugmentConfig(scale=0.5, fliplr=0.5, hsv_h=0.015, hsv_s=0.5, hsv_v=0.3)
    params = torch.from_numpy(np.stack([draw_mask_params(cfg, index=i, seed=0, rank=0, epoch=0) for i in range(8)]))
    cpu_images, cpu_masks = render_pairs(slots, masks, hw, params, 64)
    gpu_images, gpu_masks = render_pairs(slots.cuda(), masks.cuda(), hw, params, 64)
    assert (gpu_masks.cpu() != cpu_masks).float().mean() < 1e-3  # nearest may break a float tie differently
    assert torch.allclose(gpu_images.cpu(), cpu_images, atol=0.05)


def test_trains_on_one_gpu_with_device_augmentation(mini_seg: Path, tmp_path: Path) -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml")
    outcome = model.train(data=str(mini_seg), epochs=2, imgsz=128, batch=8, device=0, workers=2, lr0=1e-3,
                          project=str(tmp_path), verbose=False, plots=False)
    assert 0.0 <= outcome.metrics["metrics/mIoU"] <= 1.0 and np.isfinite(outcome.metrics["train/ce_loss"])


@pytest.mark.multigpu
def test_device_0_1_trains_segformer_and_validates_sharded(mini_seg: Path, tmp_path: Path) -> None:
    model = LibreYOLO("LibreSegFormerb0.yaml")
    outcome = model.train(data=str(mini_seg), epochs=2, imgsz=128, batch=8, device="0,1", lr0=1e-3,
                          project=str(tmp_path), verbose=False, plots=False)
    ckpt = torch.load(outcome.best, weights_only=True)
    assert ckpt["world_size"] == 2 and ckpt["global_batch"] == 8
    single = model.val(data=str(mini_seg), imgsz=128, workers=0, device=0, verbose=False)
    # Sharded confusion matrices summed = one GPU's (up to argmax ties that another batch split may flip).
    assert single.miou == pytest.approx(ckpt["best_mIoU"], abs=2e-3)


@pytest.mark.slow
@pytest.mark.learning
def test_segformer_b0_learns_shapes_seg_on_one_gpu(tmp_path: Path) -> None:
    """The best configuration of the GPU recipe sweep (docs/benchmarks.md: 192 px, lr0 7e-4, 90
    epochs, mIoU 0.549 on 2026-12-01, still rising; 60 epochs at 128 px and lr0 1e-3 gave 0.431).
    Issue 16's mIoU 0.6 is not reached yet: asserted is the level reached, the target is reported
    as an expected failure until it is met."""
    import time

    from libreyolo_models import LibreSegFormer

    started = time.perf_counter()
    model = LibreSegFormer(size="b0")
    outcome = model.train(data="shapes-seg", epochs=90, imgsz=192, batch=16, nbs=16, lr0=7e-4, scale=0.25, device=0,
                          workers=2, project=str(tmp_path), verbose=False, plots=False)
    print(f"trained in {(time.perf_counter() - started) / 60:.1f} min: {outcome.summary()}")
    miou = outcome.metrics["metrics/mIoU"]
    assert miou >= 0.45, outcome.summary()
    if miou < 0.6:
        pytest.xfail(f"mIoU {miou:.3f}: issue 16's target 0.6 is not reached yet")
