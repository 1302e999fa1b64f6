"""Where a job runs: one default-device policy for predict, val, export and train, and the
single-device resolution of ``device=`` (training's several devices go through libreyolo_ddp).

The policy (``default_device``): a ``device=`` given wins; else a model already on an
accelerator stays there; else the best device this machine has (the first CUDA GPU, else Apple
MPS, else the CPU). Each job names the device in its first log line."""

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


def best_device() -> torch.device:
    """The best device this machine has: the first CUDA GPU, else Apple MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def default_device(requested: str | int | torch.device | None, current: torch.device,
                   runs_only_on: str | None = None) -> torch.device:
    """Where a job runs (predict, val, export, train): ``requested`` when given; else a model
    already on an accelerator stays there, and a model on the CPU goes to ``best_device()``
    (``device="cpu"`` keeps it on the CPU). ``runs_only_on`` ("cpu", "cuda") is the device type an
    exported file is bound to (a TorchScript trace): with no request, the model stays on it."""
    if requested is not None and requested != "":
        return resolve_device(requested)
    if runs_only_on == "cpu":
        return torch.device("cpu")
    if current.type != "cpu":
        return current
    best = best_device()
    if runs_only_on is not None and best.type != runs_only_on:
        return current
    return best


def describe_device(device: torch.device) -> str:
    """``"cuda:0 (NVIDIA H200)"`` or ``"cpu"``: the first log line of every job."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(device)
