"""Issue 40's declarations for YOLOv9-E2E, DAMO-YOLO and YOLOv7, as the trainer resolves them:
SyncBatchNorm on by default under DDP (the spec's BatchNorm-heavy list), auto-spawn, and no graph
capture until their GPU parity rows are green."""

from __future__ import annotations

import pytest

from libreyolo_models import LibreYOLO

SMALLEST = {"yolo9_e2e": "LibreYOLO9E2Et.yaml", "damoyolo": "LibreDAMOYOLOns.yaml", "yolo7": "LibreYOLO7tiny.yaml"}


@pytest.mark.parametrize("family", sorted(SMALLEST))
def test_sync_bn_is_on_by_default_and_the_user_can_turn_it_off(family: str) -> None:
    from libreyolo_models.train.plan import resolve_plan

    model = LibreYOLO(SMALLEST[family])
    assert model.spec.name == family and model.spec.sync_bn_default and model.spec.ddp_autospawn
    assert resolve_plan(model, {"data": "shapes", "device": "cpu"}, "train()").sync_bn is True
    assert resolve_plan(model, {"data": "shapes", "device": "cpu", "sync_bn": False}, "train()").sync_bn is False
    decl = model.spec.task("detect")
    assert decl.inference_capture and decl.train_capture  # parity rows and certificates, H200 2026-12-05
