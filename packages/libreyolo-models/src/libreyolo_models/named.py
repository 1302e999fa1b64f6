"""Per-family shortcuts users of upstream LibreYOLO know: ``LibreYOLO9(size="s", nc=3)``,
``LibreRTDETR(size="r18")``, ``LibreYOLOX(size="n")``, and the classifiers'
(``LibreResNet(size="50")``).

Each is ``LibreYOLO(..., family=<name>)``; the object returned is a plain ``LibreYOLO``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .facade import LibreYOLO


def LibreYOLO9(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """YOLOv9: ``LibreYOLO9(size="t", nc=3)`` (untrained) or ``LibreYOLO9("best.pt")``."""
    return LibreYOLO(model, family="yolo9", **kwargs)


def LibreSegFormer(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - a class-like name
    """SegFormer: ``LibreSegFormer(size="b0", nc=19)`` (untrained) or ``LibreSegFormer("best.pt")``."""
    return LibreYOLO(model, family="segformer", **kwargs)


def LibreRTDETR(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """RT-DETR: ``LibreRTDETR(size="r18", nc=3)`` (untrained) or ``LibreRTDETR("LibreRTDETRr18.pt")``."""
    return LibreYOLO(model, family="rtdetr", **kwargs)


def LibreYOLOX(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """YOLOX: ``LibreYOLOX(size="s", nc=3)`` (untrained) or ``LibreYOLOX("LibreYOLOXs.pt")``."""
    return LibreYOLO(model, family="yolox", **kwargs)


def LibreRTMDet(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """RTMDet: ``LibreRTMDet(size="s", nc=3)`` (untrained) or ``LibreRTMDet("LibreRTMDets.pt")``."""
    return LibreYOLO(model, family="rtmdet", **kwargs)


def LibreResNet(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - a class-like name
    """ResNet classifier: ``LibreResNet(size="50", nc=10)`` (untrained) or ``LibreResNet("best.pt")``."""
    return LibreYOLO(model, family="resnet", **kwargs)


def LibreEfficientNetV2(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - a class-like name
    """EfficientNetV2-B classifier: ``LibreEfficientNetV2(size="b0", nc=10)`` or ``LibreEfficientNetV2("best.pt")``."""
    return LibreYOLO(model, family="efficientnetv2", **kwargs)


def LibreConvNeXt(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - a class-like name
    """ConvNeXt classifier: ``LibreConvNeXt(size="tiny", nc=10)`` or ``LibreConvNeXt("best.pt")``."""
    return LibreYOLO(model, family="convnext", **kwargs)


def LibreMobileNetV4(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - a class-like name
    """MobileNetV4 classifier: ``LibreMobileNetV4(size="small", nc=10)`` or ``LibreMobileNetV4("best.pt")``."""
    return LibreYOLO(model, family="mobilenetv4", **kwargs)


def LibreYOLONAS(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """YOLO-NAS: ``LibreYOLONAS(size="s", nc=3)`` (untrained) or ``LibreYOLONAS("best.pt")``."""
    return LibreYOLO(model, family="yolonas", **kwargs)


def LibrePICODET(model: str | Path | None = None, **kwargs: Any) -> LibreYOLO:  # noqa: N802 - upstream's name
    """PicoDet: ``LibrePICODET(size="s", nc=3)`` (untrained) or ``LibrePICODET("LibrePICODETs.pt")``."""
    return LibreYOLO(model, family="picodet", **kwargs)
