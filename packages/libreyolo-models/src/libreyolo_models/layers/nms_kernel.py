"""torchvision's NMS kernel, loaded without importing the torchvision package.

``import torchvision.ops`` imports ``torch._dynamo`` (``roi_align`` asks it whether compile is
supported): 6 s on an H200 machine's CPU and 7-9 s on a small one, paid by every process that
runs NMS for the first time and has not imported ``torch._dynamo`` otherwise: a CLI ``predict``
or ``val``, an export check, a worker of the test suite, a training run's validation (the
trainer's optimizer stays clear of it too: ``train/fused_optim.py``). The NMS kernel itself lives in
torchvision's compiled extension library, which ``torch.ops.load_library`` loads in milliseconds
and which registers the same ``torchvision::nms`` operator the package would. When that library
cannot be found or loaded (another layout, a mismatched build), the package's own loader runs
instead: slower, and it names the problem when torch and torchvision do not match.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import Tensor

from .torchvision_library import load_torchvision_library

log = logging.getLogger(__name__)

# Extension names torchvision has shipped its operators under: the stable-ABI build (0.25 on)
# and the one before it.
_EXTENSIONS = ("_C_stable", "_C")

# Above this many box coordinates torchvision runs one NMS per class instead of offsetting boxes
# by class: the kernel's suppression mask grows with the square of the boxes. Same switch here,
# so results and speed follow the package's ``batched_nms``.
_PER_CLASS_ABOVE = {"cpu": 4_000, "other": 20_000}


def _registered() -> bool:
    return hasattr(torch.ops.torchvision, "nms")


def _cuda_matches() -> bool:
    """The extension's CUDA major version is torch's (the check torchvision makes at import);
    False when it cannot say, so the package's own loader decides."""
    try:
        built = int(torch.ops.torchvision._cuda_version())
    except (AttributeError, RuntimeError):
        return False
    if built == -1 or torch.version.cuda is None:
        return True
    return int(str(built)[:2]) == int(torch.version.cuda.split(".")[0])


def _load_extension() -> bool:
    """Load torchvision's operator library directly; False when it is not there or will not load."""
    origin = load_torchvision_library(_EXTENSIONS, _registered)
    if origin is None:
        return False
    log.debug("NMS: loaded torchvision's operators from %s", origin)
    return _cuda_matches()


@functools.cache
def load_torchvision_ops() -> None:
    """Register torchvision's operators (NMS, ``deform_conv2d``, ...), cheaply when possible: what
    NMS needs, and what a TorchScript file calling them needs before ``torch.jit.load``."""
    if not _registered() and not _load_extension():
        log.debug("NMS: importing torchvision.ops to load its operators")
        import torchvision.ops  # noqa: F401 - the package's own loader registers the operator or says why not


@functools.cache
def _nms_op():  # noqa: ANN202 - a torch OpOverloadPacket
    load_torchvision_ops()
    return torch.ops.torchvision.nms


def nms(boxes: Tensor, scores: Tensor, iou: float) -> Tensor:
    """Indices of ``boxes [N, 4]`` (xyxy) kept by NMS at ``iou``, by decreasing score."""
    return _nms_op()(boxes, scores, iou)


def batched_nms(boxes: Tensor, scores: Tensor, classes: Tensor, iou: float) -> Tensor:
    """Class-aware NMS: boxes of different ``classes`` never suppress each other.

    Returns the kept indices by decreasing score, as ``torchvision.ops.batched_nms`` does.
    """
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    limit = _PER_CLASS_ABOVE["cpu" if boxes.device.type == "cpu" else "other"]
    if boxes.numel() <= limit:
        # Shift each class's boxes to a region of its own, then one NMS over all.
        offsets = classes.to(boxes) * (boxes.max() + 1)
        return nms(boxes + offsets[:, None], scores, iou)
    keep = torch.zeros_like(scores, dtype=torch.bool)
    for cls in torch.unique(classes):
        members = (classes == cls).nonzero().view(-1)
        keep[members[nms(boxes[members], scores[members], iou)]] = True
    kept = keep.nonzero().view(-1)
    return kept[scores[kept].sort(descending=True)[1]]
