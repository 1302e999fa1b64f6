"""Every family built on the DETR kit (dfine, deim, rtdetrv4, rtdetrv2, deimv2) at its smallest
size, through the facade: the loss falls over 20 steps on a fixed tiny batch (64 px, 10 queries:
the decoder's cost is query-bound), a checkpoint round trip keeps weights and predictions, and
predict on the sample image returns detections.

"Falls" means the box terms (L1 and GIoU): the classification terms of these losses grow as the
boxes improve (their positive targets are the IoU, or a power of it), and so do the IoU-weighted
distribution terms, so the total is not a monotone measure early on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LossContext
from libreyolo_models.tasks.results import Results

SMALLEST = {"dfine": "n", "deim": "n", "rtdetrv4": "s", "rtdetrv2": "r18", "deimv2": "atto"}
LR = {"deimv2": 2e-3}  # upstream's atto recipe; 1e-3 for the rest


def _model(family: str) -> LibreYOLO:
    torch.manual_seed(0)
    return LibreYOLO(family=family, size=SMALLEST[family], nc=3, names=["a", "b", "c"], imgsz=64)


# Over ~10 s on the shared CPU: a 10M (RT-DETRv4 s) and a 20M (RT-DETRv2 r18) network, 20 steps.
HEAVY = {"rtdetrv4", "rtdetrv2"}


@pytest.mark.parametrize("family", [pytest.param(f, marks=[pytest.mark.slow] if f in HEAVY else []) for f in SMALLEST])
def test_the_loss_falls_over_20_steps(family: str) -> None:
    model = _model(family)
    net, fam = model.net.train(), model.family
    fam.set_num_queries(net, 10)
    gains = model.spec.task("detect").loss_gains
    groups = fam.parameter_groups(net, weight_decay=0.0)
    lr = LR.get(family, 1e-3)
    optimizer = torch.optim.AdamW([{**g, "lr": lr * g.get("lr_scale", 1.0)} for g in groups], lr=lr)
    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    targets = torch.tensor([[0, 0, 0.3, 0.3, 0.3, 0.3], [0, 1, 0.7, 0.6, 0.4, 0.5], [1, 2, 0.5, 0.5, 0.6, 0.5]])
    boxes = []
    names = model.spec.task("detect").loss_names
    box_terms = [names.index("bbox"), names.index("giou")]
    for step in range(20):
        torch.manual_seed(step)  # the same denoising noise in every run of the test
        head = fam.training_head(net, fam.training_forward(net, images), targets)
        result = fam.compute_loss(head, targets, LossContext(gains=gains))
        optimizer.zero_grad(set_to_none=True)
        result.total.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        boxes.append(float(result.items[box_terms].sum()))
    assert sum(boxes[-5:]) / 5 < 0.8 * sum(boxes[:5]) / 5, [round(t, 2) for t in boxes]


@pytest.mark.parametrize("family", list(SMALLEST))
def test_checkpoint_round_trip_keeps_weights_metadata_and_predictions(family: str, tmp_path: Path) -> None:
    model = _model(family)
    with torch.no_grad():  # spread the scores, so there are detections to compare
        for name, param in model.net.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
    path = model.save(tmp_path / f"{family}.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"], ckpt["imgsz"]) == (family, SMALLEST[family], 3, 64)
    again = LibreYOLO(path)
    assert (again.spec.name, again.size, again.names) == (family, SMALLEST[family], model.names)
    assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), again.net.state_dict().values()))
    first = model(SAMPLE_IMAGE, conf=0.0, max_det=10)
    second = again(SAMPLE_IMAGE, conf=0.0, max_det=10)
    assert isinstance(first[0], Results) and len(first[0]) == 10
    assert torch.equal(first[0].boxes.data, second[0].boxes.data)
    bare = tmp_path / "bare.pt"
    torch.save(model.net.state_dict(), bare)   # no metadata: size and classes from the weights
    from_bare = LibreYOLO(bare, family=family)
    assert (from_bare.size, from_bare.nc) == (SMALLEST[family], 3)


@pytest.mark.parametrize("family", ["dfine", "rtdetrv2"])
def test_an_input_with_fewer_tokens_than_queries_still_trains(family: str) -> None:
    """The denoising attention mask is built for ``num_queries``; the decoder cuts it to the
    queries a small input gave (64 px: 20 tokens for D-FINE n, 84 for RT-DETRv2 r18)."""
    model = _model(family)
    net, fam = model.net.train(), model.family
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.3]])
    head = fam.training_head(net, fam.training_forward(net, torch.rand(1, 3, 64, 64)), targets)
    result = fam.compute_loss(head, targets, LossContext(gains=model.spec.task("detect").loss_gains))
    assert head["logits"].shape[2] < 300 and torch.isfinite(result.total)
