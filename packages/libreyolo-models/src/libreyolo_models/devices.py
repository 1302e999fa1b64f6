"""Single-device resolution for prediction and validation (training goes through libreyolo_ddp)."""

from __future__ import annotations

import torch

from libreyolo_ddp.devices import check_devices_available, parse_devices
from libreyolo_ddp.errors import DeviceError

from .errors import ConfigError


def resolve_device(device: str | int | torch.device | None) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"1"``, ``1``, ``"mps"``, ``"auto"`` -> one torch device.

    Raises:
        ConfigError: a value that is not a device, several devices (only training spreads over
            devices), or a device this machine does not have (CUDA or MPS missing, an index past
            the visible GPUs), each with the fix; checked before anything touches the device.
    """
    if isinstance(device, torch.device):
        device = str(device)
    if device == "cuda":
        device = "cuda:0"
    try:
        plan = parse_devices(device)
        check_devices_available(plan)
    except DeviceError as err:
        raise ConfigError(str(err)) from None
    if plan.is_distributed:
        raise ConfigError(f"device={device!r} names several GPUs; prediction and validation run on one. "
                          "Pass a single device such as device=0 (multi-GPU is for model.train).")
    return plan.torch_device(0)


def default_device(requested: str | int | torch.device | None, current: torch.device,
                   runs_only_on: str | None = None) -> torch.device:
    """Where predict and val run: ``requested`` when given; else a model already on an
    accelerator stays there, and a model on the CPU goes to ``cuda:0`` when there is a GPU
    (``device="cpu"`` keeps it on the CPU). ``runs_only_on`` ("cpu", "cuda") is the device type an
    exported file is bound to (a TorchScript trace): with no request, the model stays on it."""
    if requested is not None:
        return resolve_device(requested)
    if runs_only_on == "cpu":
        return torch.device("cpu")
    if current.type != "cpu" or not torch.cuda.is_available():
        return current
    return torch.device("cuda", 0)


def describe_device(device: torch.device) -> str:
    """``"cuda:0 (NVIDIA H200)"`` or ``"cpu"``: the first log line of predict and val."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(device)
