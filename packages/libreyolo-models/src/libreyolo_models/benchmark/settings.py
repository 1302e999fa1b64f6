"""Options of ``model.benchmark`` / ``libreyolo benchmark``."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import suggest
from ..errors import ConfigError
from ..runtime.metadata import EXPORT_FORMATS
from ..settings import check_positive_imgsz


@dataclass(frozen=True)
class BenchmarkConfig:
    """Options of ``model.benchmark`` / ``libreyolo benchmark``.

    Attributes:
        data: the dataset every format is validated on (default: the bundled ``shapes``).
        imgsz: image size of every export and of validation (default: the model's).
        formats: comma-separated formats to measure (default: every one whose runtime is
            installed and runs here, see ``available_formats``); ``pytorch`` is the model itself.
        half: add fp16 rows for the formats that store fp16 weights on this device.
        int8: add INT8 rows (OpenVINO through NNCF, ONNX Runtime's static quantiser), calibrated
            on ``calib_images`` images of ``data``.
        calib_images: images that calibrate the INT8 rows.
        runs: timed calls of the network per format (batch 1, after ``warmup`` untimed ones);
            the latency is their median.
        warmup: untimed calls first.
        batch: validation batch (latency is always batch 1).
        device: where PyTorch and the exports run (default: the model's device policy).
        project: folder the exported files are written to (kept, to deploy the best).
        verbose: log each format's validation table.
    """

    data: str = "shapes"
    imgsz: int | None = None
    formats: str | None = None
    half: bool = False
    int8: bool = False
    calib_images: int = 128
    runs: int = 50
    warmup: int = 5
    batch: int = 16
    device: str | None = None
    project: str = "runs/benchmark"
    verbose: bool = False

    def __post_init__(self) -> None:
        check_positive_imgsz(self.imgsz)
        known = ("pytorch", *EXPORT_FORMATS)
        for fmt in self.format_list() or ():
            if fmt not in known:
                raise ConfigError(f"formats: {fmt!r} is not a format; use some of {', '.join(known)}"
                                  + suggest(fmt, known))
        if self.runs < 1 or self.warmup < 0 or self.batch < 1 or self.calib_images < 1:
            raise ConfigError(f"runs={self.runs}, warmup={self.warmup}, batch={self.batch}, calib_images="
                              f"{self.calib_images}: runs, batch and calib_images must be at least 1, warmup at least 0")

    def format_list(self) -> list[str] | None:
        if self.formats is None:
            return None
        return [f.strip() for f in str(self.formats).split(",") if f.strip()]
