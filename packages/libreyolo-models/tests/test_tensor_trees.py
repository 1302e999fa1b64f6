"""Packed tensor trees round-trip exactly through torch.save(weights_only) and back; host copies
are the tensors' own; training checkpoints are serialized once for last.pt and best.pt."""

from __future__ import annotations

import io
from collections import namedtuple

import torch

from libreyolo_models.tensor_trees import host_copies, is_packed, pack_tensors, unpack_tensors

Pair = namedtuple("Pair", "a b")


def _tree() -> dict:
    g = torch.Generator().manual_seed(0)
    conv = torch.randn(8, 3, 3, 3, generator=g).contiguous(memory_format=torch.channels_last)
    return {"state": {0: {"step": torch.tensor(7.0), "exp_avg": conv.clone(), "exp_avg_sq": conv.square()},
                      1: {"step": torch.tensor(7.0), "momentum": torch.randn(5, generator=g).double()}},
            "param_groups": [{"lr": 0.01, "betas": (0.9, 0.999), "params": [0, 1]}],
            "pair": Pair(torch.arange(6, dtype=torch.int64).view(2, 3), "x"), "empty": torch.zeros(0, 4),
            "flag": torch.tensor([True, False]), "half": torch.randn(3, generator=g).half(), "note": None}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_a_packed_tree_round_trips_exactly_through_a_safe_load() -> None:
    tree = _tree()
    packed = pack_tensors(tree)
    assert isinstance(unpack_tensors(packed)["pair"], Pair)  # in memory; weights_only loads no namedtuple class
    tree["pair"] = tuple(tree["pair"])
    packed = pack_tensors(tree)
    assert is_packed(packed) and set(packed["data"]) == {"float32", "float64", "int64", "bool", "float16"}
    buf = io.BytesIO()
    torch.save(packed, buf)
    buf.seek(0)
    back = unpack_tensors(torch.load(buf, weights_only=True))
    assert _same(tree, back)
    conv = back["state"][0]["exp_avg"]
    assert conv.is_contiguous() and conv.untyped_storage().nbytes() == conv.numel() * 4  # standard layout, own memory


def test_an_unpacked_tree_passes_through_unpack() -> None:
    tree = _tree()
    assert unpack_tensors(tree) is tree and not is_packed(tree)


def test_host_copies_are_standard_layout_copies_of_their_own() -> None:
    tree = _tree()
    out = host_copies(tree)
    assert _same(tree, out)
    src = tree["state"][0]["exp_avg"]
    copied = out["state"][0]["exp_avg"]
    src.add_(1)  # training goes on: the copy keeps the values it was given
    assert not torch.equal(src, copied) and copied.is_contiguous()
    assert copied.untyped_storage().data_ptr() != out["state"][0]["exp_avg_sq"].untyped_storage().data_ptr()


def test_last_and_best_are_one_serialization(tmp_path) -> None:
    from libreyolo_models.train.checkpoints import write_epoch_checkpoints

    last, best = write_epoch_checkpoints({"w": torch.ones(3), "epoch": 4}, tmp_path, is_best=True, epoch=4,
                                         save_period=5)
    assert best is not None and last.read_bytes() == best.read_bytes() == (tmp_path / "epoch5.pt").read_bytes()
    assert torch.equal(torch.load(best, weights_only=True)["w"], torch.ones(3))
    last, best = write_epoch_checkpoints({"w": torch.zeros(3), "epoch": 5}, tmp_path, is_best=False, epoch=5,
                                         save_period=5)
    assert best is None and torch.equal(torch.load(last, weights_only=True)["w"], torch.zeros(3))
    assert torch.equal(torch.load(tmp_path / "best.pt", weights_only=True)["w"], torch.ones(3))
