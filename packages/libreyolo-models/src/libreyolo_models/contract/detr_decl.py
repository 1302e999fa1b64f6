"""Declaration data the encoder-decoder detectors share (torch-free: specs import it).

The DEIM lineage (DEIM, DEIMv2, RT-DETRv4) trains on one schedule shape and differs in length,
step and decay; the kit's decoders all trace to a fixed input size for the same reason.
"""

from __future__ import annotations

FIXED_SIZE_EXPORT_NOTE = ("its decoder reads anchor buffers built for one input size and lays out the "
                          "deformable attention's per-level sampling from feature-map sizes read as Python "
                          "numbers, which the trace freezes at the export's imgsz")
"""Why the kit's families export for one ``imgsz`` only (``TaskDecl.dynamic_imgsz_note``)."""


def deim_recipe(*, epochs: int, lr0: float, weight_decay: float, nbs: int) -> dict[str, object]:
    """The DEIM lineage's recipe in TrainConfig terms (see ``families/deim/spec.py`` for how its
    schedule and augmentation map onto ours): AdamW, cosine to 50 %, 2 warmup epochs, clipping
    at 0.1, fp32, mosaic in the first part of the run, horizontal flips."""
    return {
        "epochs": epochs, "optimizer": "AdamW", "lr0": lr0, "lrf": 0.5, "cos_lr": True, "momentum": 0.9,
        "weight_decay": weight_decay, "nbs": nbs, "warmup_epochs": 2.0, "max_grad_norm": 0.1, "amp": False,
        "mosaic": 0.5, "close_mosaic": 12, "degrees": 0.0, "translate": 0.1, "scale": 0.5, "shear": 0.0,
        "fliplr": 0.5,
    }
