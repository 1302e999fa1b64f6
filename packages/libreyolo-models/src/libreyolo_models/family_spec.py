"""A family's declarations as data: what it supports is read from here, never from code paths."""

from __future__ import annotations

from dataclasses import dataclass

# Weight-file suffix per task, as upstream names its files (detect has none).
TASK_SUFFIXES = {"detect": "", "segment": "-seg", "semantic": "-sem", "pose": "-pose",
                 "classify": "-cls", "obb": "-obb"}


@dataclass(frozen=True)
class FamilySpec:
    """Everything a family declares.

    Attributes:
        name: registry key and checkpoint ``model_family`` (``"yolo9"``).
        display_name: for messages (``"YOLOv9"``).
        weight_prefix: weight file names are ``<prefix><size>[-<task>].pt`` (``LibreYOLO9t.pt``).
        sizes: the sizes it can build; ``default_size`` is used when none is given.
        tasks: tasks it implements.
        default_imgsz: training and inference size when none is given.
        inference_capture_verified: ``predict(cuda_graph=...)`` is allowed; True only where the
            parity matrix (``docs/parity-matrix.md``) is green for this family.
        train_capture_verified: ``train(cuda_graph=True)`` captures; else it trains eagerly.
        ddp_autospawn: ``train(device="0,1")`` spawns workers itself (else: use torchrun).
        sync_bn_default: SyncBatchNorm on by default under DDP.
    """

    name: str
    display_name: str
    weight_prefix: str
    sizes: tuple[str, ...]
    default_size: str
    tasks: tuple[str, ...]
    default_imgsz: int
    inference_capture_verified: bool = False
    train_capture_verified: bool = False
    ddp_autospawn: bool = False
    sync_bn_default: bool = True

    def weight_name(self, size: str, task: str = "detect", suffix: str = ".pt") -> str:
        return f"{self.weight_prefix}{size}{TASK_SUFFIXES[task]}{suffix}"
