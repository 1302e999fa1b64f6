"""Training options that change what the trainer reads or trains, applied around the task so the
trainer only swaps its task for ``OptionedTask`` and calls ``freeze_layers`` once:

- ``single_cls=True``: every box is one class, ``"object"`` (detect): the dataset reads with its
  own classes (so its labels are still checked against them), then the class column becomes 0.
- ``fraction=0.25``: train on a seeded random quarter of the training images (the validation
  split stays whole), in their original order.
- ``rect=True`` / ``rect="val"``: rectangular batches (detect): images of similar aspect ratio
  batched together and letterboxed to the smallest stride-multiple rectangle that holds them,
  instead of a square with grey bars. ``"val"`` does it for validation only (faster, with the
  same metrics up to the changed padding); ``True`` trains that way too (no mosaic: the
  training batches are the letterboxed images with left-right flips; see ``tasks.detect.rect``).
- ``freeze=10`` / ``freeze=["backbone"]``: the first N layers (``layer_names``) or every parameter
  under the given names stop training (``requires_grad=False``; BatchNorm statistics still
  update, as in Ultralytics).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..tasks import Task
    from .settings import TrainConfig

log = logging.getLogger(__name__)

SINGLE_CLASS_NAME = "object"


def check_fit_options(cfg: TrainConfig) -> None:
    """The values of ``fraction``, ``freeze``, ``rect`` and ``save`` (the task-dependent checks come later)."""
    if not 0.0 < cfg.fraction <= 1.0:
        raise ConfigError(f"fraction={cfg.fraction} must be in (0, 1]: the share of the training images used "
                          "(e.g. 0.1 for a tenth)")
    if isinstance(cfg.freeze, int) and cfg.freeze < 0:
        raise ConfigError(f"freeze={cfg.freeze} must be a number of layers (0 or more) or a list of names")
    if not cfg.save and cfg.save_period > 0:
        raise ConfigError(f"save_period={cfg.save_period} keeps epoch checkpoints, and save=False writes none: drop "
                          "one of them")
    if cfg.rect not in (False, True, "val"):
        raise ConfigError(f"rect={cfg.rect!r} must be False, True (training and validation) or 'val'")


def layer_names(net: nn.Module) -> list[str]:
    """The network's layers in order, as ``freeze=N`` counts them: each top-level module, or, for
    one that holds others (a backbone, a neck), each module inside it; only those with parameters.
    YOLOv9-t: ``backbone.conv0``, ``backbone.conv1``, ... ``neck.elan_up1``, ... ``head.cv3``."""
    names: list[str] = []
    for name, child in net.named_children():
        inner = list(child.named_children())
        candidates = [(f"{name}.{sub}", m) for sub, m in inner] if inner else [(name, child)]
        names += [n for n, m in candidates if any(True for _ in m.parameters())]
    return names


def freeze_layers(net: nn.Module, freeze: int | list[str] | None) -> list[str]:
    """Stop training the first ``freeze`` layers, or every parameter under the given names
    (a layer, ``backbone``, a full parameter name). Returns the frozen parameter names."""
    if freeze is None or freeze == 0 or freeze == []:
        return []
    layers = layer_names(net)
    if isinstance(freeze, int):
        if freeze > len(layers):
            raise ConfigError(f"freeze={freeze} is more than the network's {len(layers)} layers (the last is "
                              f"{layers[-1]!r}); freeze fewer, or name them")
        prefixes = layers[:freeze]
    else:
        prefixes = [str(p) for p in freeze]
    params = dict(net.named_parameters())
    frozen = [n for n in params if any(n == p or n.startswith(p + ".") for p in prefixes)]
    unused = [p for p in prefixes if not any(n == p or n.startswith(p + ".") for n in params)]
    if unused:
        raise ConfigError(f"freeze={freeze!r}: {unused[0]!r} names no parameter of this network; its layers are "
                          f"{', '.join(layers[:6])}, ... (libreyolo_models.train.fit_options.layer_names)")
    for n in frozen:
        params[n].requires_grad_(False)
    count = sum(params[n].numel() for n in frozen)
    log.info("freeze: %d parameter tensors (%d values, %.0f%% of the network) stop training, under %s",
             len(frozen), count, 100 * count / max(1, sum(p.numel() for p in params.values())),
             ", ".join(prefixes[:4]) + (", ..." if len(prefixes) > 4 else ""))
    return frozen


class OptionedTask:
    """The model's task as training (or validation) sees it under ``single_cls``, ``fraction``
    and ``rect``; every other attribute and verb is the task's own.

    Args:
        task: the model's task.
        single_cls: every box becomes class 0, ``"object"``.
        fraction: the share of the training split used (seeded by ``seed``).
        rect: rectangular batches: ``True`` for training and validation, ``"val"`` validation only.
        stride: the network's stride (rectangles are multiples of it).
    """

    def __init__(self, task: Task, *, single_cls: bool = False, fraction: float = 1.0, rect: bool | str = False,
                 seed: int = 0, stride: int = 32) -> None:
        self._task, self._stride = task, stride
        self._single_cls, self._fraction, self._rect, self._seed = single_cls, fraction, rect, seed
        self._originals: dict[int, Any] = {}   # single_cls: id(one-class config) -> the dataset's own
        if single_cls and not task.supports_single_cls:
            raise ConfigError(f"single_cls=True trains every object as one class; a {task.name!r} model has no "
                              "per-object classes to merge (it works with detect, segment and pose models)")
        if rect is not False and not task.supports_rect:
            raise ConfigError(f"rect= makes rectangular batches of letterboxed pictures, which a {task.name!r} "
                              "model's pipeline does not take (it works with detect models)")

    @classmethod
    def for_training(cls, task: Task, cfg: TrainConfig, stride: int) -> OptionedTask:
        return cls(task, single_cls=cfg.single_cls, fraction=cfg.fraction, rect=cfg.rect, seed=cfg.seed,
                   stride=stride)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def load_data(self, data: Any) -> Any:
        config = self._task.load_data(data)
        if not self._single_cls:
            return config
        fields = {f.name for f in dataclasses.fields(config)}
        single = dataclasses.replace(config, names={0: SINGLE_CLASS_NAME}, **({"nc": 1} if "nc" in fields else {}))
        self._originals[id(single)] = config
        log.info("single_cls=True: the %d classes of %s train as one, %r", config.nc, config.source,
                 SINGLE_CLASS_NAME)
        return single

    def load_split(self, data: Any, split: str) -> Any:
        index = self._task.load_split(self._originals.get(id(data), data), split)
        if self._single_cls:
            labels = [np.concatenate([np.zeros_like(lab[:, :1]), lab[:, 1:]], axis=1) for lab in index.labels]
            index = dataclasses.replace(index, labels=labels, names={0: SINGLE_CLASS_NAME})
        if split == "train" and self._fraction < 1.0:
            index = take_fraction(index, self._fraction, self._seed)
        return index

    def train_pipeline(self, index: Any, **kwargs: Any) -> Any:
        if self._rect is True:
            return self._task.train_pipeline(index, rect=self._stride, **kwargs)  # type: ignore[call-arg]
        return self._task.train_pipeline(index, **kwargs)

    def val_pipeline(self, index: Any, **kwargs: Any) -> Any:
        if self._rect is not False:
            return self._task.val_pipeline(index, rect=self._stride, **kwargs)  # type: ignore[call-arg]
        return self._task.val_pipeline(index, **kwargs)


# The per-item lists of the tasks' split records, cut together by ``fraction`` (an item is an
# image, or an input/target pair): detect's labels, semantic's masks, point's points, restore's pairs,
# segment's and pose's extras (each object's mask source or keypoints).
# A task whose split holds another per-item list adds its name here, or fraction= misaligns it.
ITEM_FIELDS = ("images", "inputs", "labels", "masks", "points", "targets", "sizes", "extras")


def take_fraction(index: Any, fraction: float, seed: int) -> Any:
    """A seeded random ``fraction`` of a split's images (at least one), in their original order."""
    n = len(index)
    keep = max(1, math.ceil(n * fraction))
    chosen = np.sort(np.random.default_rng(seed).permutation(n)[:keep])
    picked = {f.name: _take(getattr(index, f.name), chosen) for f in dataclasses.fields(index)
              if f.name in ITEM_FIELDS}
    log.info("fraction=%g: training on %d of the %d images", fraction, keep, n)
    return dataclasses.replace(index, **picked)


def _take(values: Any, chosen: np.ndarray) -> Any:
    """``values[chosen]`` for a per-item list or array (classification keeps its labels in one)."""
    if isinstance(values, np.ndarray | torch.Tensor):
        return values[torch.from_numpy(chosen) if isinstance(values, torch.Tensor) else chosen]
    return [values[i] for i in chosen]
