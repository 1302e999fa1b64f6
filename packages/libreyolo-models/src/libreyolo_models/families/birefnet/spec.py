"""BiRefNet's declaration: data only (no torch import), read by the registry and the CLI."""

from __future__ import annotations

from ...contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD
from ...contract.spec import FamilySpec, TaskDecl

# The official recipe (config.py, train.py): batch 8 per GPU, AdamW with weight decay 1e-2, lr
# 1e-4 * sqrt(batch / 4) for DIS (1.41e-4 at batch 8; 1e-5 * sqrt(batch / 4) for the general
# sets), constant (its MultiStepLR decays only in the last epochs of long runs), no warmup; flips
# (plus colour, rotation and pepper noise, which the matte task does not have). nbs 8: no gradient
# accumulation at the official batch, and the trainer's weight-decay scaling (batch / nbs) is 1
# there. Differences: the trainer exempts norms and biases from decay (the official run decays all).
RECIPE: dict[str, object] = {
    "optimizer": "AdamW", "lr0": 1.41e-4, "lrf": 1.0, "momentum": 0.9, "weight_decay": 1e-2, "nbs": 8,
    "warmup_epochs": 0.0, "warmup_bias_lr": 0.0, "close_mosaic": 0,
    "mosaic": 0.0, "degrees": 0.0, "translate": 0.0, "scale": 0.0, "shear": 0.0,
    "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "fliplr": 0.5,
}

SPEC = FamilySpec(
    name="birefnet",
    display_name="BiRefNet",
    weight_prefix="LibreBiRefNet",
    sizes=("t", "l"),  # Swin-T (the official BiRefNet_lite) and Swin-L (the standard BiRefNet)
    default_size="t",
    tasks={
        "matte": TaskDecl(
            loss_names=("bce", "iou", "ssim", "mae"),
            loss_gains={"bce": 30.0, "iou": 0.5, "ssim": 10.0, "mae": 100.0},  # config.py, task 'General'
            default_imgsz=1024,  # every picture is resized to 1024 x 1024, as the official inference does
            default_nc=1,        # a matte has no classes; one nominal "foreground" class
            # The segmented graph path (plain stages graphed, the deformable samplings eager):
            # parity row t green on the H100, every segment on probes A and B (eighth run).
            inference_capture=True,
            train_capture=False,
            # Every decoder block samples through torchvision's deform_conv2d: ONNX's DeformConv
            # (opset 19, export/deform_conv_onnx.py; onnxruntime runs it) and TorchScript carry it.
            export_formats=("onnx", "torchscript"),
            export_formats_note=("its decoder's deformable convolutions (torchvision's deform_conv2d, ONNX's "
                                 "DeformConv) have no conversion in OpenVINO's ONNX reader, TensorRT's parser is "
                                 "unchecked here, and the NCNN, TFLite and Core ML converters lack the operator"),
            min_opset=19,
            dynamic_imgsz=False,
            dynamic_imgsz_note=("its Swin windows, shift masks and the decoder's patch grid are laid out for one "
                                "input size"),
            recipe=RECIPE,
        ),
    },
    implementation="libreyolo_models.families.birefnet.family:BiRefNetFamily",
    stride=32,  # the deepest Swin level and the 32 x 32 image patches of the decoder's input block
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    ddp_autospawn=True,
    sync_bn_default=True,  # BatchNorm throughout the decoder
    summary="BiRefNet alpha matting / dichotomous segmentation (Swin-T lite, Swin-L; official key layout)",
)
