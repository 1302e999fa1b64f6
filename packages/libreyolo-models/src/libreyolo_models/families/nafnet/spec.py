"""NAFNet's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.spec import FamilySpec, TaskDecl

# The official recipe (options/train/SIDD/NAFNet-width32.yml; GoPro alike): AdamW, lr 1e-3, a
# cosine decay to 1e-7 (lrf 1e-4) with no warmup, 256 px crops, batch 4 per GPU on 8 GPUs (nbs
# 32), the PSNR loss. SIDD uses no weight decay and no flips, GoPro 1e-3 and flips plus
# rotations; here: no decay, horizontal flips (the one paired flip the restore task has). The
# trainer's Adam betas are (momentum, 0.999); the official run uses (0.9, 0.9).
RECIPE: dict[str, object] = {
    "optimizer": "AdamW", "lr0": 1e-3, "lrf": 1e-4, "cos_lr": True, "momentum": 0.9, "weight_decay": 0.0,
    "warmup_epochs": 0.0, "warmup_bias_lr": 0.0, "nbs": 32, "close_mosaic": 0,
    "mosaic": 0.0, "degrees": 0.0, "translate": 0.0, "scale": 0.0, "shear": 0.0,
    "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "fliplr": 0.5,
}

SPEC = FamilySpec(
    name="nafnet",
    display_name="NAFNet",
    weight_prefix="LibreNAFNet",
    sizes=("t", "sidd32", "sidd64", "gopro32", "gopro64"),
    default_size="sidd32",
    tasks={
        "restore": TaskDecl(
            loss_names=("psnr",),
            loss_gains={"psnr": 1.0},
            default_imgsz=256,  # the official training crop; predict tiles larger images at this size
            default_nc=1,       # restoration has no classes; one nominal "image" class
            inference_capture=True,  # parity row t green on the H100 (docs/parity-matrix.md, eighth run)
            train_capture=True,  # parity's training step exact; 20-step numerics exact in fp32 and AMP (H100)
            recipe=RECIPE,
        ),
    },
    implementation="libreyolo_models.families.nafnet.family:NAFNetFamily",
    stride=16,  # four 2x downsamplings; other sizes are padded inside the network anyway
    ddp_autospawn=True,
    sync_bn_default=False,  # no BatchNorm: LayerNorm over channels only
    summary="NAFNet image restoration (denoise: SIDD widths 32/64, deblur: GoPro widths 32/64; official key layout)",
)
