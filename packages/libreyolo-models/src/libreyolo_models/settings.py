"""User-facing option sets (frozen dataclasses; one default per option) and shared checks.

Names follow what Ultralytics and upstream LibreYOLO users already type (``imgsz``, ``conf``,
``iou``, ``max_det``...). ``load_config`` converts and validates them from keyword arguments,
the command line and YAML alike. Checks that need the model (an image size against the family's
stride) happen where the model is known: ``LibreYOLO.resolve_imgsz``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .compiled import compile_mode
from .errors import ConfigError

DeviceSpec = Any
"""``device=`` as users write it: ``"cpu"``, ``"cuda:0"``, ``"0,1"``, ``0``, ``[0, 1]``, a
``torch.device`` or None (auto). ``Any`` because one validator owns the rule and its message:
``libreyolo_ddp.parse_devices`` (called before any work), not the generic type conversion."""


def device_text(device: object) -> object:
    """``device=`` as configs, ``args.yaml`` and checkpoints keep it: a list or tuple becomes ``"0,1"``,
    a ``torch.device`` its text; anything else is left for ``parse_devices`` to judge."""
    import torch  # loaded already wherever a device is used; not needed to import the settings

    if isinstance(device, list | tuple):
        return ",".join(str(d) for d in device)
    if isinstance(device, torch.device):
        return str(device)
    return device


def check_positive_imgsz(imgsz: int | None, source: str = "imgsz") -> None:
    if imgsz is not None and imgsz <= 0:
        raise ConfigError(f"{source}={imgsz} must be a positive image size in pixels, e.g. 640")


def check_number(key: str, value: object, low: float, high: float, meaning: str, *,
                 low_open: bool = False, high_open: bool = False) -> None:
    """Refuse ``value`` unless it is a finite number in the range (``low_open``/``high_open``:
    that end excluded; ``high`` may be ``math.inf``), with one line naming it, the range and what
    the option means.

    NaN fails every comparison, so the check is written as "in range or raise", never the reverse.
    """
    import math

    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} must be a finite number ({meaning})")
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (above and below):
        if math.isinf(high):
            raise ConfigError(f"{key}={value!r} must be {'>' if low_open else '>='} {low:g} ({meaning})")
        span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ConfigError(f"{key}={value!r} is outside {span} ({meaning})")


@dataclass(frozen=True)
class PredictConfig:
    """Options of ``model.predict`` / ``model(...)`` / ``libreyolo predict``."""

    conf: float = 0.25
    iou: float = 0.45
    imgsz: int | None = None
    classes: list[int] | None = None
    max_det: int = 300
    agnostic_nms: bool = False
    batch: int = 1
    save: bool = False
    save_txt: bool = False      # labels/<image>.txt in YOLO format (class cx cy w h, normalised)
    save_conf: bool = False     # with save_txt: each line ends with the confidence
    save_crop: bool = False     # crops/<class>/<image>.jpg: every box cut from the original image
    show: bool = False          # a window per image; a warning and nothing else without a display
    device: DeviceSpec = None
    half: bool = False
    fuse: bool | None = None    # None: the model's choice (LibreYOLO.fuse), else the family's; False: exact
    cuda_graph: bool | Literal["auto"] = False
    # JPEG files decoded on the GPU (nvJPEG: TorchCodec's with extra [nvjpeg], else torchvision's);
    # auto: on CUDA when one decodes there (see libreyolo_models.predict.gpu_jpeg), and video
    # frames turned RGB on the GPU; False: all decoding on the CPU, validation's exact pixels
    gpu_decode: bool | Literal["auto"] = "auto"
    # torch.compile of the network (True: mode "default"); see libreyolo_models.compiled
    compile: bool | Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = False
    project: str = "runs/predict"
    name: str = "exp"
    exist_ok: bool = False    # save into project/name as it is (True), not a new name2, name3, ...
    verbose: bool = False
    stream: bool = False      # True: a generator of Results (see predict.streams)
    vid_stride: int = 1       # keep every n-th frame of videos and streams
    # Sliced inference (detect): windows of tile pixels, tile_overlap shared between neighbours,
    # merged by class-aware NMS or a score-weighted merge (predict.tiling); None: untiled
    tile: int | None = None
    tile_overlap: float = 0.2
    tile_merge: Literal["nms", "weighted"] = "nms"
    augment: bool = False     # test-time augmentation (detect): flips and scales, merged (predict.tta)
    # Prompts of a promptable segmenter (task prompt-segment, SAM), in the picture's pixels:
    # points [[x, y], ...] (one prompt) or [[[x, y], ...], ...] (one per group), labels 1/0 per
    # point (foreground / background; default all 1), boxes [x1, y1, x2, y2] or [[...], ...]
    # (nested lists, arrays or tensors; on the command line the same lists as text, no spaces)
    points: Any = None
    labels: Any = None
    boxes: Any = None
    multimask_output: bool = True  # three masks per prompt with their scores; False: the single best
    mask_input: Any = None  # a previous call's low-res logits (Results.masks.best_logits()), to refine
    # A prompt-segment model given no prompts masks everything it finds, from a grid of point
    # prompts (contract.prompts.AutoMasks; None: the published defaults 32, 64, 0.88, 0.95, 0.7;
    # max_det caps the masks): points per grid side, points decoded at once, the predicted-IoU and
    # stability-score floors, and the box NMS threshold between masks
    points_per_side: int | None = None
    points_per_batch: int | None = None
    pred_iou_thresh: float | None = None
    stability_score_thresh: float | None = None
    box_nms_thresh: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", device_text(self.device))
        if self.vid_stride < 1:
            raise ConfigError(f"vid_stride={self.vid_stride} must be at least 1 (keep every n-th video frame)")
        check_number("conf", self.conf, 0.0, 1.0, "a score threshold")
        check_number("iou", self.iou, 0.0, 1.0, "the NMS overlap threshold")
        if self.max_det < 1:
            raise ConfigError(f"max_det={self.max_det} must be at least 1")
        if self.batch < 1:
            raise ConfigError(f"batch={self.batch} must be at least 1")
        compile_mode(self.compile, self.cuda_graph)  # an unknown mode, or one that clashes with cuda_graph
        check_positive_imgsz(self.imgsz)
        check_tiling(self.tile, self.tile_overlap, self.augment)
        check_auto_masks(self)


AUTO_MASK_OPTIONS = ("points_per_side", "points_per_batch", "pred_iou_thresh", "stability_score_thresh",
                     "box_nms_thresh")
"""Predict's options for a prompt-segment model's automatic masks (given no prompts)."""


def check_auto_masks(cfg: PredictConfig) -> None:
    for name in ("points_per_side", "points_per_batch"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name}={value!r} must be a whole number of at least 1 (the default is "
                              f"{32 if name == 'points_per_side' else 64})")
    for name in ("pred_iou_thresh", "stability_score_thresh", "box_nms_thresh"):
        value = getattr(cfg, name)
        if value is not None:
            check_number(name, value, 0.0, 1.0, "a threshold")


def check_tiling(tile: int | None, overlap: float, augment: bool) -> None:
    if tile is not None and tile < 32:
        raise ConfigError(f"tile={tile} must be a window side of at least 32 pixels (e.g. 640, the network's input "
                          "size), or None to predict untiled")
    if not 0.0 <= overlap < 1.0:
        raise ConfigError(f"tile_overlap={overlap} must be in [0, 1): the share of a tile its neighbour repeats "
                          "(0.2 is usual)")
    if tile is not None and augment:
        raise ConfigError("tile= and augment=True together would run every window of every picture three times; "
                          "choose one of them")
