"""Fuzz: random mixes of broken files never crash a run, every bad file is named, every good one used.

Each case (a seed) builds a small YOLO dataset from a menu of good images (JPEG, PNG, grey,
RGBA, palette, 16-bit, CMYK, EXIF-rotated, BMP, WebP, GIF, AVIF, a 200-character name), broken
images (truncated, corrupt middle, empty, text, junk, broken PNG chunks, dangling links) and label
files (good, absent, bad class, malformed, six columns, not UTF-8, out of range, a folder),
sometimes adds a link from inside the image folder back to it (a loop), sometimes breaks a good
image after the dataset check, then: scans the split, builds the training pipeline and reads every
batch, and predicts over the image folder and a ``**`` glob of it. Allowed outcomes are exact: the
usable images are the good ones, each once, each bad file is named in a warning, and the only
error is ``EmptySplitError``: when nothing usable is left, or when label files were rejected and
what is left holds no object. Every tenth case also runs ``libreyolo train`` and asserts exit code
0 (or 1) and no traceback.

The default run checks 10 cases; the long run checks 200 or more, one parametrized test per case
(each bounded by ``CASE_TIMEOUT_S``), spread over as many workers as there are cores::

    LIBREYOLO_FUZZ_CASES=200 uv run pytest -n 8 tests-integration/test_fuzz_bad_datasets.py -o addopts=""

Measured with 20 cases on the 2-core machine (``-n 2``, other work running): about 1 s of CPU a
case, 15-20 s for each tenth case (the CLI training run), and 20-30 s per worker for the first case
(imports, the model); 92 s wall for the 20.
"""

from __future__ import annotations

import io
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, features

from libreyolo_models import LibreYOLO9, SourceError
from libreyolo_models.data.augment_draws import AugmentConfig
from libreyolo_models.data.errors import EmptySplitError
from libreyolo_models.tasks.detect.datasets import load_split
from libreyolo_models.tasks.detect.pipeline import TrainPipeline

CASES = int(os.environ.get("LIBREYOLO_FUZZ_CASES", "10"))
CASE_TIMEOUT_S = 120
NC = 3


def _encode(pixels: np.ndarray | Image.Image, fmt: str, **kw: object) -> bytes:
    im = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _rgb(rng: np.random.Generator) -> np.ndarray:
    h, w = (int(v) for v in rng.integers(12, 48, 2))
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def _corrupt_middle(rng: np.random.Generator) -> bytes:
    """A JPEG with valid header and end marker whose entropy-coded middle fails to decode."""
    pixels = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    good = _encode(pixels, "JPEG", quality=90)
    for attempt in range(200):
        bad = bytearray(good)
        r = np.random.default_rng(attempt)
        mid = len(bad) // 2
        for j in r.integers(mid - 300, mid + 300, 60):
            bad[j] = int(r.integers(0, 256))
        try:
            with Image.open(io.BytesIO(bytes(bad))) as im:
                im.load()
        except Exception:  # noqa: BLE001 - the decoder's failure is what we want
            return bytes(bad)
    raise AssertionError("could not make a JPEG whose decoding fails")


def _good_image(kind: str, rng: np.random.Generator) -> tuple[str, bytes]:
    px = _rgb(rng)
    if kind == "gif":
        return ".gif", _encode(px, "GIF")
    if kind == "avif":
        return ".avif", _encode(px, "AVIF")
    if kind == "long_name":
        return "_" + "n" * 200 + ".png", _encode(px, "PNG")
    if kind == "jpeg":
        return ".jpg", _encode(px, "JPEG", quality=90)
    if kind == "png":
        return ".png", _encode(px, "PNG")
    if kind == "grey":
        return ".png", _encode(px[..., 0], "PNG")
    if kind == "rgba":
        return ".png", _encode(np.concatenate([px, px[..., :1]], -1), "PNG")
    if kind == "palette":
        return ".png", _encode(Image.fromarray(px).convert("P"), "PNG")
    if kind == "png16":
        return ".png", _encode(Image.fromarray(px[..., 0].astype(np.uint16) * 257), "PNG")
    if kind == "cmyk":
        return ".jpg", _encode(Image.fromarray(px).convert("CMYK"), "JPEG")
    if kind == "exif":
        exif = Image.Exif()
        exif[0x0112] = int(rng.choice([3, 6, 8]))
        return ".jpg", _encode(px, "JPEG", exif=exif)
    if kind == "bmp":
        return ".bmp", _encode(px, "BMP")
    return ".webp", _encode(px, "WEBP")


def _bad_image(kind: str, rng: np.random.Generator) -> tuple[str, bytes | None]:
    jpeg = _encode(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8), "JPEG", quality=90)
    png = _encode(_rgb(rng), "PNG")
    return {
        "truncated_jpeg": (".jpg", jpeg[: len(jpeg) // 2]),
        "corrupt_middle": (".jpg", _corrupt_middle(rng)),
        "empty": (".jpg", b""),
        "text": (".png", b"this is not an image\n"),
        "junk": (".webp", bytes(rng.integers(0, 256, 300, dtype=np.uint8))),
        "header_only": (".jpg", jpeg[:20]),
        "truncated_png": (".png", png[:-40]),
        "bad_crc": (".png", png[:40] + bytes([png[40] ^ 0xFF]) + png[41:]),
        "dangling": (".jpg", None),
    }[kind]


GOOD_IMAGES = ("jpeg", "png", "grey", "rgba", "palette", "png16", "cmyk", "exif", "bmp", "webp", "gif",
               *(("avif",) if features.check("avif") else ()), "long_name")
BAD_IMAGES = ("truncated_jpeg", "corrupt_middle", "empty", "text", "junk", "header_only", "truncated_png",
              "bad_crc", "dangling")
GOOD_LABELS = ("good", "good", "none", "empty")
BAD_LABELS = ("bad_class", "malformed", "six_columns", "not_utf8", "pixels", "folder")


def _label(kind: str, rng: np.random.Generator) -> bytes | None | str:
    cx, cy = (float(v) for v in rng.uniform(0.3, 0.7, 2))
    return {
        "good": f"{int(rng.integers(0, NC))} {cx:.3f} {cy:.3f} 0.2 0.2\n".encode(),
        "none": None,
        "empty": b"",
        "bad_class": f"{NC + 2} 0.5 0.5 0.2 0.2\n".encode(),
        "malformed": b"0 0.5 0.5\n",
        "six_columns": f"{int(rng.integers(0, NC))} {cx:.3f} {cy:.3f} 0.2 0.2 0.87\n".encode(),  # save_conf's
        "not_utf8": b"\xff\xfe\x00\x01",
        "pixels": b"0 120 80 30 20\n",
        "folder": "folder",
    }[kind]


@dataclass
class Case:
    root: Path
    good: list[Path] = field(default_factory=list)        # must be used
    bad_images: list[Path] = field(default_factory=list)  # must be named, never used
    bad_labels: list[Path] = field(default_factory=list)  # must be named; their images unused
    broken_later: Path | None = None                      # good at the scan, broken before the cache
    with_boxes: list[Path] = field(default_factory=list)  # good images whose label file holds a box

    def nothing_to_learn(self, lost: Path | None = None) -> bool:
        """Label files were rejected and the usable images left (less ``lost``) hold no object: the
        split is refused rather than trained on backgrounds alone."""
        return bool(self.bad_labels) and not any(p != lost for p in self.with_boxes)


def _make_case(seed: int, root: Path) -> Case:
    rng = np.random.default_rng([20261201, seed])
    images, labels = root / "images" / "train", root / "labels" / "train"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    case = Case(root)
    for i in range(int(rng.integers(2, 9))):
        bad_image = rng.random() < 0.35
        kind = str(rng.choice(BAD_IMAGES if bad_image else GOOD_IMAGES))
        suffix, data = (_bad_image if bad_image else _good_image)(kind, rng)
        path = images / f"im{i:02d}_{kind}{suffix}"
        if data is None:
            path.symlink_to(root / "missing.jpg")
        else:
            path.write_bytes(data)
        bad_label = not bad_image and rng.random() < 0.2
        label_kind = str(rng.choice(BAD_LABELS if bad_label else GOOD_LABELS))
        content = _label(label_kind, rng)
        label_path = labels / f"{path.stem}.txt"
        if content == "folder":
            label_path.mkdir()
        elif content is not None:
            label_path.write_bytes(content)  # type: ignore[arg-type]
        (case.bad_images if bad_image else case.bad_labels if bad_label else case.good).append(path)
        if not bad_image and label_kind == "good":
            case.with_boxes.append(path)
    if rng.random() < 0.3:
        (images / "loop").symlink_to(images)  # ** and folder walks must not see the images twice
    if case.good and rng.random() < 0.25:
        case.broken_later = case.good[int(rng.integers(0, len(case.good)))]
    (root / "data.yaml").write_text("train: images/train\nnames: [a, b, c]\n")
    return case


@pytest.fixture(scope="module")
def tiny_model() -> LibreYOLO9:
    torch.manual_seed(0)
    return LibreYOLO9(size="t", nc=NC, imgsz=32)


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize("seed", range(CASES))
def test_random_bad_dataset(seed: int, tmp_path: Path, tiny_model: LibreYOLO9,
                            caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    case = _make_case(seed, tmp_path / "ds")
    named = _expect_scan(case, caplog)
    if named is None:
        return  # nothing usable: the one allowed error, checked in _expect_scan
    _expect_pipeline(case, named, caplog)
    _expect_predict(case, tiny_model, caplog)
    if seed % 10 == 0:
        _expect_cli_train(case, tmp_path, capsys)


def _warnings(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def _expect_scan(case: Case, caplog: pytest.LogCaptureFixture) -> object | None:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        try:
            index = load_split(case.root / "data.yaml", "train", cache=True)
        except EmptySplitError as err:
            assert not case.good or case.nothing_to_learn(), f"{err} although {case.good} are good"
            assert "\n" not in str(err) and "train: " in str(err)
            index = None
    text = _warnings(caplog)
    for path in case.bad_images:
        assert f"skipped {path}: " in text, f"bad image {path.name} not named:\n{text}"
    for path in case.bad_labels:
        label = case.root / "labels" / "train" / f"{path.stem}.txt"
        assert f"skipped {label}: " in text, f"bad label of {path.name} not named:\n{text}"
    if index is None:
        return None
    assert sorted(index.images) == sorted(case.good)  # every good file used, no bad one
    load_split(case.root / "data.yaml", "train", cache=True)  # the cached verdicts agree
    return index


def _expect_pipeline(case: Case, index: object, caplog: pytest.LogCaptureFixture) -> None:
    if case.broken_later is not None:
        data = case.broken_later.read_bytes()
        case.broken_later.write_bytes(data[: max(1, len(data) // 3)])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        try:
            pipeline = TrainPipeline(index, imgsz=32, batch_size=1, device="cpu", augment=AugmentConfig(),
                                     workers=0, seed=0, cache="off")  # type: ignore[arg-type]
        except EmptySplitError as err:
            assert case.broken_later is not None and len(case.good) == 1, err
            return
    used = [Path(p) for p in pipeline._loader.dataset.paths]
    expected = [p for p in case.good if p != case.broken_later]
    assert sorted(used) == sorted(expected)
    if case.broken_later is not None:
        assert f"train: skipped {case.broken_later}: " in _warnings(caplog)
    pipeline.set_epoch(0, mosaic=True)
    batches = list(pipeline)
    assert len(batches) == len(expected) and all(b.images.shape == (1, 3, 32, 32) for b in batches)
    assert all(torch.isfinite(b.images).all() and b.images.max() <= 1 for b in batches)


def _expect_predict(case: Case, model: LibreYOLO9, caplog: pytest.LogCaptureFixture) -> None:
    readable = [p for p in case.good if p != case.broken_later]
    unreadable = [*case.bad_images, *([case.broken_later] if case.broken_later else [])]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        try:
            results = model(case.root / "images" / "train", conf=0.5, imgsz=32)
        except SourceError as err:
            assert not readable and "none of the" in str(err), err
            return
    assert sorted(Path(r.path) for r in results) == sorted(readable + case.bad_labels)  # labels do not matter
    assert sorted(Path(name) for name, _ in results.skipped) == sorted(unreadable)
    text = _warnings(caplog)
    for path in unreadable:
        assert f"skipped {path}: " in text
    if readable or case.bad_labels:  # a ** glob through the loop link finds each image once
        globbed = model(str(case.root / "images" / "train" / "**" / "*"), conf=0.5, imgsz=32)
        assert sorted(Path(r.path) for r in globbed) == sorted(readable + case.bad_labels)


def _expect_cli_train(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from libreyolo_cli.main import main

    capsys.readouterr()
    code = main(["train", "model=LibreYOLO9t.yaml", f"data={case.root / 'data.yaml'}", "epochs=1", "imgsz=64",
                 "batch=1", "workers=0", "device=cpu", "val=false", "plots=false", "verbose=false",
                 f"project={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    usable = any(p != case.broken_later for p in case.good) and not case.nothing_to_learn(case.broken_later)
    assert code == (0 if usable else 1), err[-3000:]
