"""Single-device resolution for prediction and validation (training goes through libreyolo_ddp)."""

from __future__ import annotations

import torch

from libreyolo_ddp.devices import parse_devices

from .errors import ConfigError


def resolve_device(device: str | int | torch.device | None) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"1"``, ``1``, ``"mps"``, ``"auto"`` -> one torch device.

    Raises:
        ConfigError: several devices were given (only training spreads over devices), or the
            device is not available here.
    """
    if isinstance(device, torch.device):
        device = str(device)
    if device == "cuda":
        device = "cuda:0"
    plan = parse_devices(device)
    if plan.is_distributed:
        raise ConfigError(f"device={device!r} names several GPUs; prediction and validation run on one. "
                          "Pass a single device such as device=0 (multi-GPU is for model.train).")
    return plan.torch_device(0)
