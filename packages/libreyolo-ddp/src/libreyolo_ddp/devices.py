"""Turn a user's ``device=`` value into a plan: which device type, which indices, how many ranks.

Accepted forms (``device=`` of ``model.train`` / the CLI):

==================  ==========================================================
value               plan
==================  ==========================================================
``"auto"``, None,   first CUDA GPU if any, else Apple MPS, else CPU (one process;
``""``              several GPUs are always asked for explicitly)
``"cpu"``           CPU, one process
``"mps"``           Apple GPU, one process
``0``, ``"0"``,     CUDA device 0, one process
``"cuda"``,
``"cuda:0"``
``"0,1"``,          CUDA devices 0 and 1: two ranks, spawned (or torchrun)
``[0, 1]``,
``"cuda:0,1"``,
``"cuda:0,cuda:1"``
==================  ==========================================================

Only two or more CUDA indices make a distributed plan. Indices are as this process
sees them, i.e. after any ``CUDA_VISIBLE_DEVICES`` already set by the user;
:func:`translate_visible_devices` maps them to what the workers must be given.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from libreyolo_ddp.env import dist_env
from libreyolo_ddp.errors import DeviceError

log = logging.getLogger(__name__)

DeviceType = Literal["cpu", "cuda", "mps"]

# Set by spawn() for its workers so local_device() knows whether the plan was CPU or CUDA
# (a CPU/Gloo run on a machine that happens to have GPUs must stay on the CPU).
DEVICE_TYPE_VAR = "LIBREYOLO_DDP_DEVICE_TYPE"

_FORMS = "'auto', 'cpu', 'mps', 0, '0', 'cuda:0', '0,1', [0, 1] or 'cuda:0,1'"
_INDEX = re.compile(r"^(?:cuda:)?(\d+)$")


@dataclass(frozen=True)
class DevicePlan:
    """Where training runs: one device type and the indices of the ranks' devices.

    Attributes:
        type: "cpu", "cuda" or "mps".
        indices: CUDA device indices as this process sees them, one per rank. For CPU,
            empty for one process, or ``(0, .., n-1)`` worker slots made by
            :meth:`cpu_workers` (Gloo ranks for tests and CPU-only machines).
            Always empty for MPS.
    """

    type: DeviceType
    indices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in ("cpu", "cuda", "mps"):
            raise DeviceError(f"DevicePlan type={self.type!r} must be 'cpu', 'cuda' or 'mps'")
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in self.indices):
            raise DeviceError(f"DevicePlan indices={self.indices!r} must be non-negative integers")
        if len(set(self.indices)) != len(self.indices):
            raise DeviceError(f"DevicePlan indices={self.indices!r} repeat a device; each rank needs its own")
        if self.type == "cuda" and not self.indices:
            raise DeviceError("a CUDA DevicePlan needs at least one device index, e.g. DevicePlan('cuda', (0,))")
        if self.type == "mps" and self.indices:
            raise DeviceError(f"an MPS DevicePlan takes no indices (got {self.indices!r}); there is one MPS device")

    @classmethod
    def cpu_workers(cls, n: int) -> DevicePlan:
        """A CPU plan with ``n`` Gloo ranks (tests, CPU-only machines)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise DeviceError(f"cpu_workers(n={n!r}) needs a positive number of worker processes")
        return cls("cpu", tuple(range(n)) if n > 1 else ())

    @property
    def world_size(self) -> int:
        """Number of ranks this plan runs."""
        return max(1, len(self.indices))

    @property
    def is_distributed(self) -> bool:
        """True when the plan needs two or more processes (the spawn / torchrun case)."""
        return self.world_size > 1

    def torch_device(self, rank: int = 0) -> torch.device:
        """The device of ``rank`` as numbered in THIS process.

        Spawned workers see only their plan's GPUs, renumbered from 0; inside a worker
        use :func:`local_device` instead.
        """
        if not 0 <= rank < self.world_size:
            raise DeviceError(f"rank={rank} is outside this plan's {self.world_size} rank(s) ({self})")
        if self.type == "cuda":
            return torch.device("cuda", self.indices[rank])
        return torch.device(self.type)

    def __str__(self) -> str:
        if self.type == "cuda":
            return "cuda:" + ",".join(str(i) for i in self.indices)
        if self.type == "cpu" and self.indices:
            return f"cpu x{len(self.indices)}"
        return self.type


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity mask where the platform has one (a
    container lent 2 cores of a 64-core host has 2), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _bad(device: object, why: str) -> DeviceError:
    return DeviceError(f"device={device!r} {why}; use one of {_FORMS}")


def _auto_plan() -> DevicePlan:
    if torch.cuda.is_available():
        plan = DevicePlan("cuda", (0,))
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        plan = DevicePlan("mps")
    else:
        plan = DevicePlan("cpu")
    log.info("device='auto' resolved to %s", plan)
    return plan


def _parse_index(item: object, device: object) -> int:
    if isinstance(item, bool):
        raise _bad(device, f"contains the boolean {item!r}, not a device index")
    if isinstance(item, int):
        if item < 0:
            raise _bad(device, f"contains the negative index {item}")
        return item
    if isinstance(item, str):
        match = _INDEX.match(item.strip().lower())
        if match:
            return int(match.group(1))
    raise _bad(device, f"contains {item!r}, which is not a CUDA device index")


def _cuda_plan(items: Sequence[object], device: object) -> DevicePlan:
    if not items:
        raise _bad(device, "names no device")
    indices = tuple(_parse_index(i, device) for i in items)
    if len(set(indices)) != len(indices):
        raise _bad(device, "repeats a device index; each rank needs its own GPU")
    return DevicePlan("cuda", indices)


def parse_devices(device: str | int | Sequence[int | str] | torch.device | None = "auto") -> DevicePlan:
    """Parse a ``device=`` value into a :class:`DevicePlan` (forms in the module docstring).

    Only the syntax is checked (and, for "auto", what exists); call
    :func:`check_devices_available` before using a plan, so a plan can be built
    and inspected on a machine without its GPUs.

    Raises:
        DeviceError: the value is not one of the accepted forms; the message names the
            value and lists the forms.
    """
    if device is None:
        return _auto_plan()
    if isinstance(device, torch.device):
        if device.type == "cuda":
            return DevicePlan("cuda", (device.index or 0,))
        if device.type in ("cpu", "mps"):
            return DevicePlan(device.type)  # type: ignore[arg-type]
        raise _bad(device, f"is of type {device.type!r}, which this package does not train on")
    if isinstance(device, bool):
        raise _bad(device, "is a boolean, not a device")
    if isinstance(device, int):
        return _cuda_plan([device], device)
    if isinstance(device, (list, tuple)):
        return _cuda_plan(list(device), device)
    if not isinstance(device, str):
        raise _bad(device, f"has type {type(device).__name__}")
    text = device.strip().lower()
    if text in ("", "auto"):
        return _auto_plan()
    if text in ("cpu", "mps", "mps:0"):
        return DevicePlan(text.split(":")[0])  # type: ignore[arg-type]
    if text == "cuda":
        return DevicePlan("cuda", (0,))
    body = text[len("cuda:"):] if text.startswith("cuda:") else text
    items = body.split(",")
    if any(not i.strip() for i in items):
        raise _bad(device, "has an empty entry between commas")
    return _cuda_plan(items, device)


def check_devices_available(plan: DevicePlan) -> None:
    """Fail early, with the fix, when a plan names devices this machine does not have.

    Raises:
        DeviceError: CUDA/MPS is unavailable, or an index is past the visible count.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if plan.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device={str(plan)!r} asks for CUDA, but torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES={visible!r}); use device='cpu' or fix the driver/torch build"
            )
        count = torch.cuda.device_count()
        missing = [i for i in plan.indices if i >= count]
        if missing:
            raise DeviceError(
                f"device={str(plan)!r} names CUDA index {missing[0]}, but only {count} device(s) are visible "
                f"(indices 0..{count - 1}; CUDA_VISIBLE_DEVICES={visible!r}); pick indices below {count}"
            )
    elif plan.type == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise DeviceError("device='mps' asks for Apple's GPU, which this machine/torch build lacks; use device='cpu'")


def translate_visible_devices(indices: Sequence[int], visible: str | None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that gives workers exactly the plan's GPUs.

    Indices are as the user's process sees them: with ``CUDA_VISIBLE_DEVICES="4,5,6,7"``
    already set, indices ``(0, 1)`` are physical GPUs 4 and 5, so the workers get
    ``"4,5"`` and each uses ``cuda:LOCAL_RANK`` inside that set. Entries may be
    numbers, UUIDs (``GPU-...``) or MIG names; they are passed through verbatim.

    Args:
        indices: the plan's CUDA indices.
        visible: the current ``CUDA_VISIBLE_DEVICES`` value, or None when unset.

    Raises:
        DeviceError: an index is past the entries of ``visible``.
    """
    if visible is None:
        return ",".join(str(i) for i in indices)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    for i in indices:
        if i >= len(entries):
            raise DeviceError(
                f"device index {i} is out of range for CUDA_VISIBLE_DEVICES={visible!r} "
                f"({len(entries)} visible device(s)); indices count within that list, so use 0..{len(entries) - 1} "
                f"or change CUDA_VISIBLE_DEVICES"
            )
    return ",".join(entries[i] for i in indices)


def local_device(device_type: DeviceType | None = None) -> torch.device:
    """The device this rank trains on: ``cuda:LOCAL_RANK`` on GPUs, else CPU or MPS.

    Under torchrun and in workers of :func:`~libreyolo_ddp.spawn` (whose
    ``CUDA_VISIBLE_DEVICES`` holds just the plan's GPUs) the local rank is the index.

    Args:
        device_type: force a type; when None, the type spawn() recorded for its workers,
            else CUDA when available, else CPU.
    """
    chosen = device_type or os.environ.get(DEVICE_TYPE_VAR) or ("cuda" if torch.cuda.is_available() else "cpu")
    if chosen == "cuda":
        return torch.device("cuda", dist_env().local_rank)
    if chosen in ("cpu", "mps"):
        return torch.device(chosen)
    raise DeviceError(f"device type {chosen!r} (from {DEVICE_TYPE_VAR} or the argument) must be 'cpu', 'cuda' or 'mps'")
