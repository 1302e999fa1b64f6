"""``model.quantize(recipe)`` and ``model.dequantize()``: inference weights in fewer bits, and back.

Recipes:

- ``"fp16"``, ``"bf16"``: every weight cast (the fused inference copy, folded from the fp32 weights
  first, rounds once, as ``half()`` does). Inference only.
- ``"int8"``: weight-only int8 for the ``nn.Linear`` layers (``layers.quantized``). Offered only to
  linear-heavy networks (at least ``LINEAR_SHARE_MIN`` of the parameters in linear layers:
  ConvNeXt, SegFormer, RF-DETR, EC); a convolutional family is refused by name, since int8 would
  leave nearly all of it as it was.

The fp32 weights are kept (CPU copies) so ``dequantize()`` restores them bit for bit. Both verbs
drop every captured graph through ``ModelGraphs.invalidate`` with the reason logged; the next
``predict(cuda_graph=...)`` captures the quantized network anew, and replays what its eager call
computes. Before returning, ``quantize`` runs one blank image through the network and the
family's post-processing on the model's device: a recipe the device cannot run (a kernel missing
for that dtype) is refused there, with the weights restored, instead of failing in a later predict.
A quantized model predicts, validates and exports (the export records the precision); training
and saving a checkpoint ask for ``dequantize()`` first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from .config import suggest
from .errors import ConfigError
from .handle import Quantization
from .layers.quantized import linear_share, quantize_linears, restore_linears
from .settings import PredictConfig
from .tensor_trees import host_copies

if TYPE_CHECKING:
    from .handle import ModelHandle

log = logging.getLogger(__name__)

RECIPES: dict[str, torch.dtype | None] = {"fp16": torch.float16, "bf16": torch.bfloat16, "int8": None}
LINEAR_SHARE_MIN = 0.5
"""int8 is offered where linear layers hold at least this share of the parameters."""


def quantize_model(model: ModelHandle, recipe: str) -> dict[str, Any]:
    """Quantize ``model``'s weights for inference with ``recipe``; returns ``model.info()``.

    Raises:
        ConfigError: an unknown recipe; an exported model; weights not in fp32 (after ``half()``)
            or already quantized with another recipe; int8 for a family that is not linear-heavy;
            a recipe the model's device cannot run (the weights are restored first).
    """
    model.require_pytorch("quantize")
    if recipe not in RECIPES:
        raise ConfigError(f"quantize(recipe={recipe!r}): unknown recipe; use one of {', '.join(RECIPES)}"
                          + suggest(recipe, RECIPES))
    held = model.quantization
    if held is not None:
        if held.recipe == recipe:
            log.info("quantize(%r): the model already is; nothing to do", recipe)
            return model.info()
        raise ConfigError(f"quantize({recipe!r}): the model is quantized to {held.recipe!r}; call "
                          f"model.dequantize() first, then quantize({recipe!r})")
    if model.dtype != torch.float32:
        raise ConfigError(f"quantize({recipe!r}) starts from fp32 weights, but the model holds {model.dtype} (after "
                          "half()?); call model.float() first")
    if recipe == "int8":
        share = linear_share(model.net)
        if share < LINEAR_SHARE_MIN:
            raise ConfigError(
                f"quantize('int8'): {model.spec.display_name} ({model.spec.name}) keeps {share:.0%} of its parameters in "
                f"linear layers, and int8 here quantizes linear layers only (weight-only, layers.quantized), so it "
                f"would leave the network as it is; int8 is offered to families with at least "
                f"{LINEAR_SHARE_MIN:.0%} (ConvNeXt, SegFormer, RF-DETR, EC). Use quantize('fp16') on a GPU or "
                "quantize('bf16') instead")
    reason = f"quantize({recipe!r})"
    saved = host_copies(model.net.state_dict())
    dtype = RECIPES[recipe]
    if dtype is not None:
        if model.wants_fuse():
            model.fused_net()  # folded from the fp32 weights, then cast with them (half()'s rule)
        model.cast_weights(dtype, reason)
        linears: tuple[str, ...] = ()
    else:
        model.graphs.invalidate(reason)
        model.drop_fused(reason)
        linears = tuple(quantize_linears(model.net))
    model.quantization = Quantization(recipe, saved, linears)
    _check_runs(model, recipe)
    what = f"{len(linears)} linear layers to int8" if linears else f"weights to {dtype}"
    log.info("quantized %s-%s: %s on %s; captured graphs dropped, dequantize() restores the fp32 weights",
             model.spec.name, model.size, what, model.device)
    return model.info()


def dequantize_model(model: ModelHandle) -> dict[str, Any]:
    """Restore the fp32 weights ``quantize`` kept (bit for bit); returns ``model.info()``."""
    held = model.quantization
    if held is None:
        log.info("dequantize(): the model is not quantized; nothing to do")
        return model.info()
    reason = f"dequantize() from {held.recipe!r}"
    model.graphs.invalidate(reason)
    model.drop_fused(reason)
    if held.linears:
        restore_linears(model.net)
    model.net.float()
    model.net.load_state_dict(held.fp32_state)
    model.quantization = None
    log.info("dequantized %s-%s: fp32 weights restored; captured graphs dropped", model.spec.name, model.size)
    return model.info()


def _check_runs(model: ModelHandle, recipe: str) -> None:
    """One blank image through the network predict runs and the family's post-processing, on the
    model's device; on failure the fp32 weights come back and the error names the recipe, the
    device and what to do instead."""
    net = model.inference_net()
    was_training = net.training
    net.eval()
    imgsz = model.imgsz
    blank = [torch.zeros(imgsz, imgsz, 3, dtype=torch.uint8)]
    try:
        x, _ = model.task_spec.prepare_batch(blank, imgsz, model.dtype, model.device)
        with torch.inference_mode():
            out = model.inference_forward(x, net=net)
            model.family.postprocess(out, model.task_spec.postprocess_options(vars(PredictConfig())))
    except (RuntimeError, NotImplementedError, AttributeError, TypeError) as err:
        dequantize_model(model)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if recipe == "int8":
            fix = (f"{model.spec.display_name} reads a linear layer's weights outside its forward, so int8 is not "
                   "available for it; use quantize('fp16') on a GPU or quantize('bf16')")
        elif model.device.type == "cpu":
            fix = "quantize on a GPU (model.to(0) first)" + (" or use quantize('bf16')" if recipe == "fp16" else "")
        else:
            fix = "use quantize('fp16')" if recipe == "bf16" else "use quantize('bf16')"
        raise ConfigError(f"quantize({recipe!r}): {model.spec.display_name} ({model.spec.name}) cannot run {recipe} "
                          f"inference on {model.device} ({type(err).__name__}: {first}); the fp32 weights are back. "
                          f"{fix}") from err
    finally:
        net.train(was_training)
