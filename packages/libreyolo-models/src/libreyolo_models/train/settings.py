"""``TrainConfig``: every training option, with its one default (names as Ultralytics users know them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from ..data.augment_draws import AugmentConfig
from ..data.cache_store import CacheSetting, parse_cache_setting
from ..errors import ConfigError
from ..settings import DeviceSpec, check_number, device_text
from ..tasks.classify.augment import ClassifyAugment
from .fit_options import check_fit_options

_AUG = AugmentConfig()
_CLS = ClassifyAugment()


@dataclass(frozen=True)
class TrainConfig:
    """Options of ``model.train(...)`` and ``libreyolo train``.

    ``batch`` is the global batch: images per optimizer step over all devices (each of N GPUs
    trains at batch / N). ``batch=-1`` picks the largest batch that fits (CUDA only).
    """

    data: str = ""
    epochs: int = 100
    imgsz: int | None = None
    batch: int = 16
    device: DeviceSpec = None           # "cpu", 0, "0,1", [0, 1], "cuda:0"...; None: auto
    workers: int | None = None          # None: sized from the CPU count (logged)
    optimizer: Literal["auto", "SGD", "AdamW", "Adam"] = "auto"
    lr0: float = 0.01
    lrf: float = 0.01
    momentum: float = 0.937
    weight_decay: float = 5e-4
    warmup_epochs: float = 3.0
    warmup_momentum: float = 0.8
    warmup_bias_lr: float = 0.1
    cos_lr: bool = False
    nbs: int = 64
    amp: bool = True
    close_mosaic: int = 10
    # Augmentation: the defaults live in AugmentConfig (one default per setting).
    mosaic: float = _AUG.mosaic
    degrees: float = _AUG.degrees
    translate: float = _AUG.translate
    scale: float = _AUG.scale
    shear: float = _AUG.shear
    hsv_h: float = _AUG.hsv_h
    hsv_s: float = _AUG.hsv_s
    hsv_v: float = _AUG.hsv_v
    fliplr: float = _AUG.fliplr
    # Classification only (``ClassifyAugment`` checks them; detection never reads them): the random
    # resized crop's smallest area share, RandAugment's magnitude (0 off, 0-30), the mixup and
    # CutMix Beta(alpha, alpha) parameters (0 off), and label smoothing of the targets.
    crop_min_area: float = _CLS.crop_min_area
    randaugment: float = _CLS.randaugment
    mixup: float = _CLS.mixup
    cutmix: float = _CLS.cutmix
    label_smoothing: float = 0.0
    # Loss gains: None keeps the family's own (``TaskDecl.loss_gains``); ``gains`` sets any term by
    # name (``gains="obj:2,l1:1"`` on the command line). A name the family lacks is an error.
    box: float | None = None
    cls: float | None = None
    dfl: float | None = None
    gains: dict[str, float] | None = None
    # Start from this state dict (a file: a torchvision model's, or a LibreYOLO checkpoint of the
    # same architecture); the class outputs stay freshly initialised for the dataset's classes.
    pretrained: str | None = None
    patience: int = 100
    seed: int = 0
    deterministic: bool = False
    project: str = "runs/train"
    name: str = "exp"
    exist_ok: bool = False
    resume: bool = False
    save_period: int = -1
    # False: no checkpoint files (weights/last.pt, best.pt): the model object still ends on the best
    # epoch's EMA weights, handed over in memory; results.csv, args.yaml and plots are still written.
    # For runs nobody resumes or deploys from disk: sweeps, tests, epochs of seconds.
    save: bool = True
    val: bool = True
    plots: bool = True                  # results.png, labels.jpg, train_batch*.jpg, confusion matrix, curves
    tensorboard: bool = False           # event files in the run folder (extra: libreyolo-models[tensorboard])
    mlflow: bool = False                # MLFLOW_TRACKING_URI, else <project>/mlflow (extra: [mlflow])
    wandb: bool = False                 # Weights & Biases; WANDB_MODE=offline works without login (extra: [wandb])
    comet: bool = False                 # Comet; offline (a zip in the run folder) without COMET_API_KEY (extra: [comet])
    clearml: bool = False               # ClearML; an offline session without a configured server (extra: [clearml])
    dvclive: bool = False               # DVCLive files in <run folder>/dvclive (extra: [dvclive])
    log_every: int = 50                 # loggers get the losses every this many batches
    cuda_graph: bool = False
    multi_scale: bool = False
    cache: CacheSetting = "auto"        # "auto", "ram", "disk", "gpu", "off" or a folder (data.cache_store)
    gpu_augment: bool | Literal["auto"] = "auto"
    sync_bn: bool | None = None         # Python argument; None: the family's default
    profile: bool = False
    channels_last: bool | Literal["auto"] = "auto"    # CUDA: NHWC weights and images; auto: on for CUDA
    cudnn_benchmark: bool | Literal["auto"] = "auto"  # auto: CUDA runs of 2,000+ steps, unless deterministic or multi_scale
    max_grad_norm: float = 10.0                       # clip the gradient norm to this; 0 disables clipping
    # DETR families: decoder queries selected from the encoder while training and validating (None:
    # the family's own, 300 for most). A decoder's cost grows with its queries, not with the image.
    num_queries: int | None = None
    val_conf: float = 0.001
    val_iou: float = 0.7
    max_det: int = 300
    verbose: bool = True
    # What trains on what (train.fit_options): layers frozen (the first N, or names), one class
    # for every box, rectangular batches (True: training too; "val": validation only), a share
    # of the training images
    freeze: int | list[str] | None = None
    # The learning-rate multiplier of the backbone's own optimizer groups, instead of the family's
    # recipe (which assumes a pretrained backbone: EC 0.05, RT-DETR 0.1, ...): 1.0 trains an
    # untrained backbone at the full rate (train.optim.scale_backbone_groups).
    backbone_lr_scale: float | None = None
    single_cls: bool = False
    rect: bool | Literal["val"] = False
    fraction: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", device_text(self.device))  # [0, 1] -> "0,1": saved and resumed as text
        check_fit_options(self)
        if parse_cache_setting(self.cache).mode == "gpu" and self.gpu_augment is False:
            raise ConfigError("cache='gpu' keeps the training images on the GPU for batches rendered there, but "
                              "gpu_augment=False renders them in the workers; drop one of them")
        if not self.data:
            raise ConfigError("train needs data=...: a data.yaml path, a dataset folder, or the bundled 'shapes'")
        if self.epochs < 1:
            raise ConfigError(f"epochs={self.epochs} must be at least 1")
        if self.batch == 0 or self.batch < -1:
            raise ConfigError(f"batch={self.batch} must be a positive global batch, or -1 to fit the GPU memory")
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"workers={self.workers} must be 0 or more")
        if self.log_every < 1:
            raise ConfigError(f"log_every={self.log_every} must be at least 1 (batches between logged losses)")
        if self.nbs < 1:
            raise ConfigError(f"nbs={self.nbs} must be at least 1 (the nominal batch for gradient accumulation)")
        self._check_numbers()
        if self.num_queries is not None and self.num_queries < 1:
            raise ConfigError(f"num_queries={self.num_queries} must be a positive number of decoder queries "
                              "(or None for the family's own)")
        if self.deterministic and self.cudnn_benchmark is True:
            raise ConfigError("cudnn_benchmark=True contradicts deterministic=True (cuDNN's autotuner picks kernels "
                              "run by run); drop one of them")
        self.augment()  # AugmentConfig checks each augmentation value's range
        self.classify_augment()
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing={self.label_smoothing} must be in [0, 1) (0.1 is usual)")

    def _check_numbers(self) -> None:
        """Every numeric hyperparameter: finite and in its range (``HYPERPARAMETER_RANGES``)."""
        for key, (low, high, low_open, high_open, meaning) in HYPERPARAMETER_RANGES.items():
            value = getattr(self, key)
            if value is not None:
                check_number(key, value, low, high, meaning, low_open=low_open, high_open=high_open)
        for key, gain in (self.gains or {}).items():
            check_number(f"gains[{key}]", gain, 0.0, math.inf, "a loss term's weight")
        for key in ("patience", "close_mosaic", "max_det", "seed"):
            floor = 1 if key == "max_det" else 0
            if getattr(self, key) < floor:
                raise ConfigError(f"{key}={getattr(self, key)} must be at least {floor}")

    def augment(self) -> AugmentConfig:
        """The augmentation settings as the data pipeline takes them."""
        return AugmentConfig(**{f.name: getattr(self, f.name) for f in fields(AugmentConfig)})

    def classify_augment(self) -> ClassifyAugment:
        """The classification augmentation settings (``hsv_*`` and ``fliplr`` shared with detection)."""
        return ClassifyAugment(**{f.name: getattr(self, f.name) for f in fields(ClassifyAugment)})

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def requested_gains(self) -> dict[str, float]:
        """The loss gains the user set, by term name (``box``/``cls``/``dfl`` and ``gains``)."""
        named = {k: float(v) for k in ("box", "cls", "dfl") if (v := getattr(self, k)) is not None}
        return {**named, **{str(k): float(v) for k, v in (self.gains or {}).items()}}


HYPERPARAMETER_RANGES: dict[str, tuple[float, float, bool, bool, str]] = {
    # key: (low, high, low excluded, high excluded, what it is): checked once, in TrainConfig
    "lr0": (0.0, 1.0, True, False, "the initial learning rate; 0.01 is usual for SGD, 0.001-0.002 for AdamW"),
    "lrf": (0.0, 1.0, False, False, "the final learning rate as a share of lr0"),
    "momentum": (0.0, 1.0, False, True, "SGD momentum, or Adam's beta1; 0.937 and 0.9 are usual"),
    "weight_decay": (0.0, 1.0, False, False, "the L2 weight decay at the nominal batch; 5e-4 is usual"),
    "warmup_epochs": (0.0, math.inf, False, False, "epochs of learning-rate warmup; 0 turns it off"),
    "warmup_momentum": (0.0, 1.0, False, True, "the momentum warmup starts from"),
    "warmup_bias_lr": (0.0, 1.0, False, False, "the bias learning rate warmup starts from"),
    "backbone_lr_scale": (0.0, math.inf, True, False, "the backbone's learning-rate multiplier (1.0: the full rate)"),
    "box": (0.0, math.inf, False, False, "the box loss gain"),
    "cls": (0.0, math.inf, False, False, "the class loss gain"),
    "dfl": (0.0, math.inf, False, False, "the distribution focal loss gain"),
    "max_grad_norm": (0.0, math.inf, False, False, "the largest gradient norm a step keeps; 10 is the default, "
                                              "0 turns clipping off"),
    "val_conf": (0.0, 1.0, False, False, "the score threshold of validation during training"),
    "val_iou": (0.0, 1.0, False, False, "the NMS overlap threshold of validation during training"),
}
"""The numeric hyperparameters' ranges. A value outside (NaN and inf included) is one
``ConfigError`` line naming it, before any data is read; predict and val check their thresholds
the same way."""

# Options whose change on resume is allowed and handled (others are reported, then the saved value wins).
RESUME_MAY_CHANGE = frozenset({"epochs", "device", "workers", "patience", "verbose", "plots", "cache",
                               "gpu_augment", "resume", "profile", "cuda_graph", "save_period",
                               "channels_last", "cudnn_benchmark", "tensorboard", "mlflow", "wandb",
                               "comet", "clearml", "dvclive", "log_every"})
