"""YOLOv9 matches upstream LibreYOLO: state-dict layout (every key, shape, dtype, in order, for
t/s/m/c) and eval-mode numerics (size t, the "hash" deterministic weights, 320x320 input).

The data under ``data/upstream/`` comes from upstream; the fill rule below is restated from its
notes: each state-dict entry ``i`` (natural order, every entry counted) gets a deterministic base
sequence, transformed per kind of entry.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from libreyolo_models.families.yolo9.nn import Yolo9Net

DATA = Path(__file__).parent / "data" / "upstream"
HASH_GAIN = 2.75
MASK32 = np.uint64(0xFFFFFFFF)
MUL = np.uint64(0x45D9F3B)


def read_manifest(size: str) -> tuple[dict[str, int], list[tuple[str, str, str]]]:
    lines = (DATA / f"manifest-yolo9-{size}.tsv").read_text().splitlines()
    header = dict(tok.split("=") for tok in lines[0].split() if "=" in tok)
    rows = [tuple(line.split("\t")) for line in lines[1:]]
    return {k: int(v) for k, v in header.items() if v.isdigit()}, rows


def mix32(h: np.ndarray) -> np.ndarray:
    h = h.astype(np.uint64)
    h ^= h >> np.uint64(16)
    h = (h * MUL) & MASK32
    h ^= h >> np.uint64(16)
    h = (h * MUL) & MASK32
    h ^= h >> np.uint64(16)
    return h


def hash_base(index: int, numel: int) -> np.ndarray:
    seed = mix32(np.array([index + 1], dtype=np.uint64))[0]
    k = np.arange(numel, dtype=np.uint64)
    h = mix32((k + seed) & MASK32)
    return (h.astype(np.float64) / 2.0**31 - 1.0).astype(np.float32)


def fill_hash(model: nn.Module) -> None:
    """Overwrite every state-dict entry with upstream's deterministic "hash" weights."""
    state = model.state_dict()
    filled = {}
    for i, (key, value) in enumerate(state.items()):
        if not value.is_floating_point():
            filled[key] = value
            continue
        owner = model.get_submodule(key.rsplit(".", 1)[0])
        s = hash_base(i, value.numel())
        is_norm = isinstance(owner, nn.BatchNorm2d)
        if is_norm and key.endswith("running_var"):
            out = np.float32(1) + np.float32(0.5) * np.abs(s)
        elif is_norm and key.endswith("weight"):
            out = np.float32(1) + np.float32(0.1) * s
        elif value.dim() >= 2:
            fan_in = value.numel() / value.shape[0]
            out = s * np.float32(HASH_GAIN / math.sqrt(fan_in))
        else:
            out = s * np.float32(0.1)
        filled[key] = torch.from_numpy(out.reshape(tuple(value.shape)))
    model.load_state_dict(filled)


def leaves(outputs: dict) -> list[tuple[str, torch.Tensor]]:
    found = [("predictions", outputs["predictions"])]
    found += [(f"raw_outputs[{i}]", t) for i, t in enumerate(outputs["raw_outputs"])]
    found += [(f"{name}.features", outputs[name]["features"]) for name in ("x8", "x16", "x32")]
    return found


@pytest.mark.parametrize("size", ["t", "s", "m", "c"])
def test_state_dict_layout_matches_upstream_manifest(size: str) -> None:
    header, rows = read_manifest(size)
    model = Yolo9Net(size, nc=80)
    ours = [(k, "x".join(map(str, v.shape)) if v.dim() else "scalar", str(v.dtype).removeprefix("torch."))
            for k, v in model.state_dict().items()]
    assert ours == rows
    assert sum(p.numel() for p in model.parameters()) == header["params"]
    assert len(ours) == header["entries"]


def test_hash_fill_reproduces_upstream_checksums() -> None:
    model = Yolo9Net("t", nc=80)
    fill_hash(model)
    state = list(model.state_dict().items())
    rows = [line.split("\t") for line in (DATA / "fill-yolo9-t.tsv").read_text().splitlines()[1:]]
    for row in rows[:: max(1, len(rows) // 60)]:  # a spread of entries across the network
        i, key, first_hash = int(row[0]), row[1], row[11]
        assert state[i][0] == key
        if first_hash:
            assert state[i][1].flatten()[0].item() == pytest.approx(float(first_hash), abs=0)
            assert state[i][1].double().sum().item() == pytest.approx(float(row[10]), rel=1e-9, abs=1e-9)


def test_forward_matches_upstream_hash_vectors() -> None:
    ref = np.load(DATA / "vectors-yolo9-t-hash.npz", allow_pickle=False)
    model = Yolo9Net("t", nc=80).eval()
    fill_hash(model)
    with torch.no_grad():
        outputs = model(torch.from_numpy(ref["input"]))
    got = leaves(outputs)
    assert [name for name, _ in got] == list(ref["out_names"])
    for i, (name, tensor) in enumerate(got):
        expected = torch.from_numpy(ref[f"out{i}"])
        assert tensor.shape == expected.shape, name
        atol = 1e-3 if name == "predictions" else 1e-5
        torch.testing.assert_close(tensor, expected, rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def test_train_and_eval_mode_return_the_same_structure() -> None:
    model = Yolo9Net("t", nc=3)
    x = torch.rand(2, 3, 64, 96)
    train_out = model.train()(x)
    eval_out = model.eval()(x)
    assert [n for n, _ in leaves(train_out)] == [n for n, _ in leaves(eval_out)]
    assert train_out["predictions"].shape == (2, 4 + 3, 8 * 12 + 4 * 6 + 2 * 3)
