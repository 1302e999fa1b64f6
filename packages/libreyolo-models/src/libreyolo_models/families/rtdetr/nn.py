"""RT-DETR's network: ``layers.detr.rtdetr_net`` (shared with RT-DETRv2) in RT-DETR's layout."""

from __future__ import annotations

from ...layers.detr.rtdetr_net import RTDETRNet

__all__ = ["RTDETRNet"]
