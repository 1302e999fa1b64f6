"""A source's short last batch runs padded to the batch (``predict.predictor.pad_rows``): the
full batch's shape and layout, eager and graphed alike, its own rows kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo_models import LibreYOLO9

IMGSZ = 64


@pytest.fixture(scope="module")
def model() -> LibreYOLO9:
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, names=["circle", "square", "triangle"], imgsz=IMGSZ, device="cpu")
    with torch.no_grad():  # confident enough to give boxes to compare
        for seq in m.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    return m


def test_a_short_last_batch_runs_padded_to_the_batch_and_keeps_its_own_rows(model, tmp_path) -> None:
    """The tail of a folder replays the full batch's shape (no new graph for one call), eager and
    graphed alike; a source of one short batch runs at its own size."""
    from libreyolo_models.predict.predictor import pad_rows

    for i in range(5):
        Image.fromarray(np.full((30 + i, 40, 3), 40 * i, np.uint8)).save(tmp_path / f"{i}.png")
    seen: list[int] = []
    net = model.inference_net(model.wants_fuse(None))
    hook = net.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    try:
        padded = model(tmp_path, batch=2, conf=0.01)
        alone = [model(tmp_path / f"{i}.png", conf=0.01)[0] for i in range(5)]
        assert seen == [2, 2, 2, 1, 1, 1, 1, 1]
        seen.clear()
        model(tmp_path, batch=8, conf=0.01)
        assert seen == [5]
    finally:
        hook.remove()
    assert [r.source for r in padded] == [str(tmp_path / f"{i}.png") for i in range(5)]
    assert sum(len(r) for r in padded) > 0
    for a, b in zip(padded, alone):  # the same rows, whatever they were batched with
        assert len(a) == len(b) and torch.allclose(a.boxes.data, b.boxes.data, atol=1e-3) and a.orig_shape == b.orig_shape
    x = torch.randint(0, 255, (3, 3, 8, 8), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    full = torch.cat((x, torch.zeros_like(x[:1])))
    assert pad_rows(x, 4).stride() == full.stride() and torch.equal(pad_rows(x, 4), full)


@pytest.mark.cuda
def test_a_graphed_folder_with_a_short_tail_replays_one_graph(tmp_path) -> None:
    """The padded tail keeps the full batch's layout (channels_last uint8), so it replays the
    same graph: one capture for the whole folder."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(0)
    m = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ, device=0)
    for i in range(5):
        Image.fromarray(np.full((48, 64, 3), 40 * i, np.uint8)).save(tmp_path / f"{i}.png")
    graphed = m(tmp_path, batch=2, conf=0.01, cuda_graph=True)
    eager = m(tmp_path, batch=2, conf=0.01)
    graphs = m.graph_info()["graphs"]
    assert len(graphs) == 1 and graphs[0]["replays"] == 3, graphs
    for a, b in zip(graphed, eager):
        assert torch.equal(a.boxes.data, b.boxes.data)
