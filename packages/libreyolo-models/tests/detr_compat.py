"""Helpers for the upstream-compatibility tests of the DETR families built on ``layers.detr``
(dfine, deim, rtdetrv4, rtdetrv2, deimv2): layouts of every size, bare-state-dict reading, and the
shared vectors compared after aligning query rows by ``aux_topk_index`` (README 8.5/8.6).

Import as ``from detr_compat import ...`` (the tests folder is on ``sys.path``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from upstream_fill import DATA, fill_weights, layout_rows, read_manifest

from libreyolo_models.contract.family import Family
from libreyolo_models.zoo.registry import get_family


def family_for(name: str, size: str, imgsz: int | tuple[int, int] | None = None, nc: int = 80) -> Family:
    spec = get_family(name)
    return spec.family_class()(spec, size, "detect", nc, imgsz=imgsz)


def check_layout(name: str, size: str) -> None:
    """Every key, shape, dtype in order, the parameter count and the persistent buffers (built on
    the meta device: shapes only, the big sizes in a second)."""
    header, rows = read_manifest(f"{name}-{size}")
    with torch.device("meta"):
        net = family_for(name, size).build_network()
    assert layout_rows(net) == rows
    assert sum(p.numel() for p in net.parameters()) == header["params"]
    keys = set(net.state_dict())
    assert sum(b.numel() for k, b in net.named_buffers() if k in keys) == header["buffers"]


def bare_state(name: str, size: str) -> dict[str, torch.Tensor]:
    """An upstream state dict of the manifest's shapes (meta tensors: no memory)."""
    _, rows = read_manifest(f"{name}-{size}")
    return {key: torch.empty([int(d) for d in shape.split("x")] if shape != "scalar" else [], device="meta")
            for key, shape, _ in rows}


def run_vectors(name: str, size: str, variant: str) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, np.ndarray]]:
    """Upstream's fill on a network built for 320x320, its eval forward on the vectors' input.

    Returns ``(outputs, per-anchor encoder score max [1, A], the reference npz)``.
    """
    ref = dict(np.load(DATA / f"vectors-{name}-{size}{'-hash' if variant == 'hash' else ''}.npz",
                       allow_pickle=False))
    assert list(ref["out_names"]) == ["pred_logits", "pred_boxes"]
    net = family_for(name, size, imgsz=320).build_network().eval()
    fill_weights(net, variant)
    scores: list[torch.Tensor] = []
    head: nn.Module = net.decoder.enc_score_head  # type: ignore[assignment]
    hook = head.register_forward_hook(lambda m, i, o: scores.append(o.max(-1).values))
    with torch.no_grad():
        out = net(torch.from_numpy(ref["input"]))
    hook.remove()
    return out, scores[0], ref


def aligned_rows(scores: torch.Tensor, ref: dict[str, np.ndarray]) -> torch.Tensor | None:
    """Our query rows in upstream's query order (matched by encoder token), or None when our
    top-k chose another set of tokens than upstream's."""
    queries = ref["aux_topk_index"].shape[1]
    ours = scores.topk(queries, dim=1).indices[0].tolist()
    theirs = ref["aux_topk_index"][0].tolist()
    if set(ours) != set(theirs):
        return None
    row_of = {token: row for row, token in enumerate(ours)}
    return torch.tensor([row_of[t] for t in theirs])


def assert_vectors(name: str, size: str, *, logits_atol: float, boxes_atol: float, scores_atol: float) -> None:
    """Hash vectors: encoder scores per anchor, the same top-k set, rows equal after alignment."""
    out, scores, ref = run_vectors(name, size, "hash")
    torch.testing.assert_close(scores, torch.from_numpy(ref["aux_enc_score_max"]), rtol=0, atol=scores_atol)
    order = aligned_rows(scores, ref)
    assert order is not None, "the encoder's top-k chose other tokens than upstream's"
    torch.testing.assert_close(out["pred_logits"][0, order], torch.from_numpy(ref["out0"])[0], rtol=0,
                               atol=logits_atol)
    torch.testing.assert_close(out["pred_boxes"][0, order], torch.from_numpy(ref["out1"])[0], rtol=0,
                               atol=boxes_atol)
