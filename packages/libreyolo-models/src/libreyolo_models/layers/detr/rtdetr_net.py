"""The RT-DETR network (and RT-DETRv2's): backbone -> hybrid encoder -> decoder. Tensors in, a dict
of tensors out; no NMS, no ``.item()``, no I/O.

Upstream's ``RTDETRModel`` / ``RTDETRv2Model``: state-dict keys start with ``backbone.``,
``encoder.`` and ``decoder.``, in upstream's order, so upstream checkpoints load unchanged. The two halves are
methods because training captures only the first: ``features`` (backbone + encoder, no data
dependence) and the decoder, whose denoising queries follow each batch's boxes.
"""

from __future__ import annotations

from torch import Tensor, nn

from .csp_encoder import HybridEncoder
from .denoising import DenoisingQueries
from .resnet import ResNetVd
from .rtdetr_decoder import RTDETRDecoder
from .rtdetr_hgnet import HGNetv2
from .rtdetr_sizes import NUM_HEADS, NUM_POINTS, NUM_QUERIES, STRIDES, VARIANTS


class RTDETRNet(nn.Module):
    """RT-DETR of ``size`` (r18, r34, r50, r50m, r101, l, x) for ``nc`` classes.

    ``v2_layout``: RT-DETRv2's decoder keys and buffers (its ``anchors``/``valid_mask`` built for
    ``imgsz`` (H, W)); the same computation.
    """

    def __init__(self, size: str, nc: int = 80, *, v2_layout: bool = False,
                 imgsz: tuple[int, int] = (640, 640)) -> None:
        super().__init__()
        if size not in VARIANTS:
            raise ValueError(f"RT-DETR has no size {size!r}; sizes: {', '.join(VARIANTS)}")
        v = VARIANTS[size]
        self.size, self.nc = size, nc
        if v.backbone == "resnet":
            self.backbone: nn.Module = ResNetVd(int(v.depth), v.frozen_norm)
        else:
            self.backbone = HGNetv2(str(v.depth), v.frozen_norm)
        self.encoder = HybridEncoder(self.backbone.out_channels, v.hidden_dim, NUM_HEADS, v.encoder_ffn, v.expansion)
        self.decoder = RTDETRDecoder(nc, [v.hidden_dim] * 3, dim=v.decoder_dim, ffn=v.decoder_ffn, heads=NUM_HEADS,
                                     depth=v.decoder_layers, points=NUM_POINTS, eval_idx=v.eval_idx,
                                     num_queries=NUM_QUERIES, v2_layout=v2_layout, imgsz=imgsz, strides=STRIDES)

    def features(self, images: Tensor) -> list[Tensor]:
        """The training-capture prefix: ``[B, 3, H, W]`` in [0, 1] -> the encoder's three maps
        ``[B, hidden, H/s, W/s]`` for s = 8, 16, 32."""
        return self.encoder(self.backbone(images))

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """``pred_logits [B, 300, nc]`` (raw) and ``pred_boxes [B, 300, 4]`` (cx, cy, w, h in [0, 1])
        of the inference layer, queries in encoder top-k order. The same in train and eval mode."""
        return self.decoder(self.features(images))

    def forward_train(self, features: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """The eager training remainder: the decoder over ``features`` with ``denoising`` queries
        (see ``RTDETRDecoder.forward_train`` for what it returns)."""
        return self.decoder.forward_train(features, denoising)
