"""DEIMv2's implementation of the family contract: the shared DETR glue (``detr_family``) with
DEIMv2's network, loss, run-progress-aware matching and backbone learning rates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from ...contract.detr import DETRFamily, LossFn
from ...contract.family import LossContext
from ...errors import CheckpointError
from .loss import make_loss
from .nn import DEIMv2Net
from .sizes import SIZES

SHARED_HEAD = "decoder.dec_bbox_head."


class DEIMv2Family(DETRFamily):
    """DEIMv2 detect, sizes atto/femto/pico/n/s/m/l/x, built for one input size (``imgsz``;
    default 320 atto, 416 femto, 640 the rest)."""

    def build_network(self) -> nn.Module:
        return DEIMv2Net(self.size, self.nc, imgsz=self.imgsz)

    def make_loss(self, gains: Mapping[str, float]) -> LossFn:
        return make_loss(self.nc, self.size, gains)

    def loss_options(self, ctx: LossContext) -> dict[str, Any]:
        return {"progress": ctx.epoch / max(ctx.epochs, 1)}

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Older atto/femto/pico files hold the shared box head once (``.0.``): copy it to the alias
        keys ``.1.`` and ``.2.`` the layout has, as upstream's loader does."""
        out = dict(state)
        shared = "decoder.decoder.layers.0.norm2.scale" in out   # atto/femto/pico: no gate, one box head
        if shared and SHARED_HEAD + "0.layers.0.weight" in out and SHARED_HEAD + "1.layers.0.weight" not in out:
            for key in [k for k in out if k.startswith(SHARED_HEAD + "0.")]:
                for alias in ("1", "2"):
                    out[key.replace(SHARED_HEAD + "0.", f"{SHARED_HEAD}{alias}.", 1)] = out[key]
        return out

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The decoder's width and the backbone's layout tell the size."""
        score = state.get("decoder.enc_score_head.weight")
        if score is None:
            raise CheckpointError("not a DEIMv2 detection state dict: 'decoder.enc_score_head.weight' is missing")
        width = int(score.shape[1])
        if "backbone.dinov3.storage_tokens" in state:
            return "x" if any(".mlp.w1." in k for k in state) else "l"
        if "backbone.dinov3._model.cls_token" in state:
            return "s" if width == 192 else "m"
        return {64: "atto", 96: "femto", 112: "pico", 128: "n"}.get(width)

    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """As the shared groups, with the backbone's rate from the size table; for the ViT sizes
        only the ViT itself (``backbone.dinov3``) is slowed, the adapter trains at the full rate."""
        v = SIZES[self.size]
        groups = super().parameter_groups(net, weight_decay=weight_decay)
        if not v.dino:
            for group in groups:
                if group["group"].startswith("backbone"):
                    group["lr_scale"] = v.backbone_lr
            return groups
        vit = {id(p) for p in net.backbone.dinov3.parameters()}  # type: ignore[union-attr]
        out: list[dict[str, Any]] = []
        for group in groups:
            if not group["group"].startswith("backbone"):
                out.append(group)
                continue
            slow = [p for p in group["params"] if id(p) in vit]
            fast = [p for p in group["params"] if id(p) not in vit]
            out.append({**group, "params": slow, "lr_scale": v.backbone_lr})
            out.append({**group, "params": fast, "group": group["group"].replace("backbone", "adapter")})
        return out
