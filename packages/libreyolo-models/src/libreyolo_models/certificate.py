"""Parity certificates: what a model's numbers were checked against, where, and with what result.

A certificate is a small record: what was measured (family, size, task, training precision,
batch, device), where (torch, CUDA and cuDNN versions, GPU name), what came out (the training
numerics class: ``exact``, ``eager-noise`` or ``diverges``, see ``libreyolo_cudagraph.train_numerics``;
whether graphs ran; hashes of the network's outputs on fixed probes) and when. Two writers:

- ``tools/numerics_classes.py`` measures families on a GPU machine and writes the table shipped
  with the package (``assets/certificates.json``, empty until a GPU session fills it);
- the trainer writes its own run's record into every checkpoint it saves (key ``certificate``):
  whether its steps ran graphed, and the class the table certifies for that family, size, task
  and precision on that device type (``unmeasured`` where the table has no row).

``graph_info()`` reads them back with ``describe_numerics``: the checkpoint's certificate and
whether the environment the model runs in now matches it. A mismatch is information (the class
was measured under another torch or GPU), never an error: nothing refuses to run because of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import Tensor

from .tensor_trees import tensor_leaves

log = logging.getLogger(__name__)

CERTIFICATE_KEY = "certificate"  # where a checkpoint carries its certificate
CERTIFICATES_FILE = Path(__file__).parent / "assets" / "certificates.json"
ENVIRONMENT_FIELDS = ("torch", "cuda", "cudnn", "gpu")
UNMEASURED = "unmeasured"
SCHEMA = 1


class Environment(TypedDict):
    """Where numbers were computed: what ``Certificate``'s environment fields hold."""

    torch: str
    cuda: str | None
    cudnn: str | None
    gpu: str | None


@dataclass(frozen=True)
class Certificate:
    """One measured (or run) configuration and its numerics.

    Attributes:
        family, size, task: the model.
        dtype: training precision: ``"float32"``, or ``"amp-float16"`` (fp16 autocast on CUDA).
        batch: images per step (the trainer: the global batch).
        device: device type the numbers came from (``"cuda"``, ``"cpu"``).
        torch, cuda, cudnn, gpu: the environment (``torch.__version__``, ``torch.version.cuda``,
            ``torch.backends.cudnn.version()``, the GPU's name; None where there is none).
        numerics_class: ``exact``, ``eager-noise``, ``diverges`` or ``unmeasured``.
        graphed: whether the measured (or trained) steps replayed CUDA graphs.
        probe_hashes: short sha256 of outputs on fixed probes (``probe_hashes``), by probe name.
        date: ISO date of the measurement or the save.
        source: who wrote it (``tools/numerics_classes.py (20 steps)``, ``train``).
        spread: eager-vs-eager relative distance per group (loss, weights, grads, buffers),
            where the numerics tool measured one.
        distance: graphed-vs-eager relative distance per group, from the same measurement.
    """

    family: str
    size: str
    task: str
    dtype: str
    batch: int
    device: str
    torch: str
    cuda: str | None
    cudnn: str | None
    gpu: str | None
    numerics_class: str
    graphed: bool
    probe_hashes: dict[str, str] = field(default_factory=dict)
    date: str = ""
    source: str = ""
    spread: dict[str, float] = field(default_factory=dict)
    distance: dict[str, float] = field(default_factory=dict)
    schema: int = SCHEMA

    def environment(self) -> Environment:
        return Environment(torch=self.torch, cuda=self.cuda, cudnn=self.cudnn, gpu=self.gpu)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (strings, numbers, dicts): a checkpoint loads it with ``weights_only=True``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Certificate:
        """Read a certificate written by this or a later version (keys it does not know are
        ignored). Raises ``ValueError`` naming the missing keys when it is not a certificate."""
        known = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(name for name in required if name not in data)
        if missing:
            raise ValueError(f"not a numerics certificate: missing {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in known})

    def key(self) -> tuple[str, str, str, str, str]:
        """What a table row is unique for: family, size, task, precision, device type."""
        return self.family, self.size, self.task, self.dtype, self.device


def training_precision(amp: bool, device: torch.device) -> str:
    """The certificate's ``dtype`` for a training run: AMP counts only on CUDA (the trainer's rule)."""
    return "amp-float16" if amp and device.type == "cuda" else "float32"


def current_environment(device: torch.device | None = None) -> Environment:
    """torch, CUDA and cuDNN versions, and the name of ``device``'s GPU (None off a GPU)."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    gpu = None
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(device)
    return Environment(torch=str(torch.__version__), cuda=torch.version.cuda, cudnn=str(cudnn) if cudnn else None,
                       gpu=gpu)


def environment_mismatches(cert: Certificate, environment: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each environment field that differs: ``{"gpu": {"certified": "NVIDIA H200", "current": None}}``."""
    return {name: {"certified": getattr(cert, name), "current": environment.get(name)}
            for name in ENVIRONMENT_FIELDS if getattr(cert, name) != environment.get(name)}


def tree_hash(tree: Any) -> str:
    """First 16 hex digits of a sha256 over every tensor of ``tree`` (dtype, shape, bytes), in order."""
    digest = hashlib.sha256()
    for t in tensor_leaves(tree):
        t = t.detach().to("cpu").contiguous()
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def probe_hashes(forward: Callable[[Tensor], Any], imgsz: int, *, device: torch.device,
                 dtype: torch.dtype = torch.float32) -> dict[str, str]:
    """Hashes of ``forward``'s outputs on the parity probes (``libreyolo_cudagraph.contrasting_probes``:
    A uniform in [0, 1), B ``3 * normal + 1``, batch 1, drawn on the CPU from fixed seeds), under
    ``inference_mode``. Equal hashes mean bit-identical outputs: a later environment can check
    whether it computes what the certified one did."""
    from libreyolo_cudagraph import contrasting_probes

    (probe_a,), (probe_b,) = contrasting_probes((1, 3, imgsz, imgsz), dtype=dtype, device=device)
    with torch.inference_mode():
        return {"A": tree_hash(forward(probe_a)), "B": tree_hash(forward(probe_b))}


@lru_cache(maxsize=4)
def _read_table(path: Path, mtime_ns: int) -> tuple[Certificate, ...]:  # mtime: a rewritten file is read anew
    rows = json.loads(path.read_text())
    return tuple(Certificate.from_dict(row) for row in rows)


def certified_table(path: Path | None = None) -> tuple[Certificate, ...]:
    """The certificates shipped with the package (or those in ``path``); empty when there is no file.
    An unreadable file logs a warning and counts as empty: certificates inform, never block."""
    path = path or CERTIFICATES_FILE
    if not path.is_file():
        return ()
    try:
        return _read_table(path, path.stat().st_mtime_ns)
    except (ValueError, TypeError, OSError) as err:
        log.warning("numerics certificates in %s are unreadable (%s); treating them as absent", path, err)
        return ()


def find_certified(family: str, size: str, task: str, dtype: str, device: str,
                   path: Path | None = None) -> Certificate | None:
    """The table's row for this configuration, or None where none was measured."""
    return next((c for c in certified_table(path) if c.key() == (family, size, task, dtype, device)), None)


def certified_divergence(family: str, task: str, dtype: str, device: str,
                          path: Path | None = None) -> Certificate | None:
    """A ``diverges`` row of this family and task at this precision and device, of any size (the
    table measures each family's smallest: the capture code is the family's, not the size's);
    None where no size diverges. Such a configuration is never trained graphed."""
    return next((c for c in certified_table(path) if (c.family, c.task, c.dtype, c.device) == (family, task, dtype, device)
                 and c.numerics_class == "diverges"), None)


def certified_classes(family: str, size: str, task: str, path: Path | None = None) -> dict[str, str]:
    """Every measured class of this model: ``{"float32 on cuda": "exact", ...}``."""
    return {f"{c.dtype} on {c.device}": c.numerics_class for c in certified_table(path)
            if (c.family, c.size, c.task) == (family, size, task)}


def today() -> str:
    return dt.date.today().isoformat()


def describe_numerics(checkpoint: Mapping[str, Any], *, family: str, size: str, task: str,
                      device: torch.device) -> dict[str, Any]:
    """``graph_info()["numerics"]``: the checkpoint's certificate (None for a model without one),
    its class and whether graphs ran, whether this environment matches the certified one (and
    which fields differ), and every class the shipped table certifies for this model."""
    info: dict[str, Any] = {"class": None, "graphed": None, "certificate": None, "environment_matches": None,
                            "environment_mismatches": {},
                            "certified_classes": certified_classes(family, size, task)}
    raw = checkpoint.get(CERTIFICATE_KEY)
    if raw is None:
        return info
    try:
        cert = Certificate.from_dict(raw)
    except (ValueError, TypeError, AttributeError) as err:
        info["problem"] = f"the checkpoint's certificate is unreadable: {err}"
        return info
    mismatches = environment_mismatches(cert, current_environment(device))
    info.update({"class": cert.numerics_class, "graphed": cert.graphed, "certificate": cert.to_dict(),
                 "environment_matches": not mismatches, "environment_mismatches": mismatches})
    return info
