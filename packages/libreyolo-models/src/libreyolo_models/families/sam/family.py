"""SAM's implementation of the family contract: the image encoder is the inference seam (captured
where graphs are allowed), its embeddings are cached per input (``cache``), and each call's
prompts are decoded eagerly per picture (``predict_postprocess``, which val also uses), or, with
none, a grid of point prompts gives everything in the picture (``automatic``). Pretrained-only."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...contract.prompts import (
    MASK_THRESHOLD,
    PromptImage,
    PromptPrediction,
    Prompts,
    logits_to_picture,
    outside_picture,
    to_input_coords,
)
from ...errors import CheckpointError, ConfigError
from .automatic import generate_masks
from .cache import EmbeddingCache
from .nn import ARCHS, Sam

_WIDTH_KEY = "image_encoder.pos_embed"
_INFERENCE_ONLY = ("SAM is a pretrained-only family here: its training (interactive prompt simulation over SA-1B) "
                   "is not implemented; use predict with points= or boxes=")


class SamFamily(Family):
    """Segment Anything, ViT-B / L / H."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.embeddings = EmbeddingCache()
        """Recent inputs' image embeddings (``hits`` / ``misses``): one encoder pass per picture."""

    def build_network(self) -> nn.Module:
        spec = self.spec
        if spec.mean is None or spec.std is None:
            raise ValueError(f"{spec.name}: SAM needs the input normalisation (mean/std) in its spec")
        if self.size not in ARCHS:
            raise ValueError(f"SAM has no size {self.size!r}; sizes: {', '.join(ARCHS)}")
        return Sam(ARCHS[self.size], spec.mean, spec.std)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if _WIDTH_KEY not in state:
            raise CheckpointError(f"not a SAM state dict: {_WIDTH_KEY!r} is missing")
        return 1

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The encoder's width tells the sizes apart (768, 1024, 1280)."""
        if _WIDTH_KEY not in state:
            return None
        width = int(state[_WIDTH_KEY].shape[-1])
        return next((size for size, arch in ARCHS.items() if arch.width == width), None)

    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, S, S]`` (padded with the pixel mean) -> ``[B, 256, S / 16, S / 16]`` embeddings."""
        return net(images)

    def predict_forward(self, net: nn.Module, forward: Callable[[Tensor], Any]) -> Callable[[Tensor], Any]:
        return self.embeddings.wrap(net, forward)

    def predict_postprocess(self, net: nn.Module, outputs: Tensor, options: Any,
                            infos: Sequence[Any]) -> list[PromptPrediction]:
        """Each picture's prompts (original pixels) -> its masks at the original size (eager)."""
        if not isinstance(options, Prompts) or not isinstance(net, Sam) or not (options.count or options.automatic):
            raise ConfigError("SAM decodes masks from prompts: predict with points= and/or boxes=")
        if options.automatic is not None:
            return [generate_masks(net, outputs[i:i + 1], info, options.automatic) for i, info in enumerate(infos)]
        for info in infos:
            outside = outside_picture(options, info.orig_shape)
            if outside is not None:
                height, width = info.orig_shape
                raise ConfigError(f"prompt {outside} lies outside the {width}x{height} picture; points= and boxes= "
                                  "are in the picture's pixels (x from 0 to its width, y to its height)")
        return [decode_prompts(net, outputs[i:i + 1], options, info) for i, info in enumerate(infos)]

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """The image embeddings, one per picture (prompts are decoded by ``predict_postprocess``)."""
        return list(outputs.unbind(0))

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        raise ConfigError(_INFERENCE_ONLY)

    def compute_loss(self, outputs: Any, targets: Any, ctx: LossContext) -> LossResult:
        raise ConfigError(_INFERENCE_ONLY)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """Boxes to prompt with (the parity tool's inference rows need none; here for the contract)."""
        corner = torch.rand((batch, 2), generator=generator) * imgsz / 2
        return torch.cat([corner, corner + imgsz / 4], dim=1)


@torch.inference_mode()
def decode_prompts(net: Sam, embedding: Tensor, prompts: Prompts, image: PromptImage) -> PromptPrediction:
    """One picture's ``[1, 256, h, w]`` embedding and the call's prompts -> its masks, scores, logits."""
    device = embedding.device
    points = None
    if prompts.points is not None and prompts.labels is not None:
        points = (to_input_coords(prompts.points.to(device), image), prompts.labels.to(device))
    boxes = None
    if prompts.boxes is not None:
        corners = to_input_coords(prompts.boxes.to(device).reshape(-1, 2, 2), image)
        boxes = corners.reshape(-1, 4)
    mask_prompts = None
    if prompts.masks is not None:
        side = 4 * int(embedding.shape[-1])
        if tuple(prompts.masks.shape[-2:]) != (side, side):
            height, width = (int(v) for v in prompts.masks.shape[-2:])
            raise ConfigError(f"mask_input holds {height}x{width} logits, but at imgsz={image.side} the decoder takes "
                              f"{side}x{side}: pass the low-resolution logits a call at the same imgsz returned "
                              "(Results.masks.best_logits())")
        mask_prompts = prompts.masks.to(device)
        if mask_prompts.shape[0] == 1 and prompts.count > 1:
            mask_prompts = mask_prompts.expand(prompts.count, -1, -1, -1)
    logits, scores = net.decode(embedding, points, boxes, (image.side, image.side), prompts.multimask, mask_prompts)
    masks = logits_to_picture(logits, image) > MASK_THRESHOLD
    return PromptPrediction(masks=masks, scores=scores.float(), logits=logits.float(), image=image)
