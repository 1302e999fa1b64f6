"""``ValConfig``: options of ``model.val(...)`` and ``libreyolo val``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..data.cache_store import CacheSetting, parse_cache_setting
from ..errors import ConfigError
from ..settings import DeviceSpec, check_number, device_text


@dataclass(frozen=True)
class ValConfig:
    data: str = ""
    split: Literal["train", "val", "test"] = "val"
    imgsz: int | None = None
    batch: int = 16
    conf: float = 0.001
    iou: float = 0.7
    max_det: int = 300
    device: DeviceSpec = None
    workers: int | None = None
    half: bool = False
    fuse: bool = False
    cache: CacheSetting = "auto"
    plots: bool = False        # confusion matrices and P/R/F1/PR curves into project/name
    save_json: bool = False    # predictions.json in the COCO results format, into project/name
    rect: bool = False         # rectangular batches (detect): similar aspect ratios together, less padding
    single_cls: bool = False   # every box one class (detect; a model trained with single_cls=True)
    project: str = "runs/val"
    name: str = "exp"
    exist_ok: bool = False     # write into project/name as it is (True), not a new name2, name3, ...
    verbose: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", device_text(self.device))
        parse_cache_setting(self.cache)
        if not self.data:
            raise ConfigError("val needs data=...: a data.yaml path, a dataset folder, or the bundled 'shapes'")
        if self.batch < 1:
            raise ConfigError(f"batch={self.batch} must be at least 1")
        check_number("conf", self.conf, 0.0, 1.0, "the score threshold of validation; 0.001 counts every box for mAP")
        check_number("iou", self.iou, 0.0, 1.0, "the NMS overlap threshold")
        if self.max_det < 1:
            raise ConfigError(f"max_det={self.max_det} must be at least 1")
