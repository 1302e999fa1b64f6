"""What an exported file says about itself: enough to rebuild the model around the runtime.

The same JSON document goes into every format: ONNX ``metadata_props`` (key ``libreyolo``), a
TorchScript extra file, CoreML's user-defined metadata (key ``libreyolo``), a ``libreyolo.json``
inside a TFLite file (a zip appended to the flatbuffer, which its interpreter ignores) and a
``libreyolo.json`` beside an OpenVINO, NCNN or TensorRT model in its folder. A file without it was
not written by ``model.export`` and is refused with that reason, since family, task and class
names cannot be guessed from a graph.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CheckpointError

EXPORT_FORMATS = ("onnx", "torchscript", "openvino", "ncnn", "tflite", "coreml", "engine")
METADATA_KEY = "libreyolo"  # ONNX metadata key; TorchScript extra file and OpenVINO file: libreyolo.json
METADATA_FILE = "libreyolo.json"
SCHEMA = 2  # 2: dynamic_imgsz (a schema-1 file reads as a fixed image size, which it was)


@dataclass(frozen=True)
class ExportMetadata:
    """The model's identity and the input contract of the exported graph.

    ``batch`` and ``imgsz`` are the traced input shape; with ``dynamic`` the graph accepts any
    batch, and with ``dynamic_imgsz`` any height and width that are multiples of ``stride``
    (``imgsz`` is then the default size). ``input_dtype`` is what the graph reads (``float16`` for
    half exports of ONNX and TorchScript).
    """

    format: str
    family: str
    size: str
    task: str
    nc: int
    names: dict[int, str]
    imgsz: int
    batch: int
    dynamic: bool
    half: bool
    input_dtype: str
    stride: int
    mean: tuple[float, float, float] | None
    std: tuple[float, float, float] | None
    outputs: int
    version: str
    dynamic_imgsz: bool = False
    schema: int = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        data["names"] = {str(k): v for k, v in self.names.items()}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> ExportMetadata:
        """Parse what ``to_json`` wrote; ``CheckpointError`` naming ``source`` when it is not that."""
        try:
            data = json.loads(text)
            schema = int(data.get("schema", 0))
        except (ValueError, TypeError, AttributeError) as err:
            raise CheckpointError(f"{source}: its LibreYOLO metadata is unreadable ({err}); re-export the model "
                                  "with model.export(...)") from None
        if schema > SCHEMA:
            raise CheckpointError(f"{source}: exported with metadata schema {schema}, newer than this libreyolo "
                                  f"reads ({SCHEMA}); upgrade libreyolo")
        try:
            data["names"] = {int(k): str(v) for k, v in data["names"].items()}
            for key in ("mean", "std"):
                data[key] = tuple(data[key]) if data.get(key) is not None else None
            return cls(**data)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(f"{source}: its LibreYOLO metadata is unreadable ({err}); re-export the model "
                                  "with model.export(...)") from None
