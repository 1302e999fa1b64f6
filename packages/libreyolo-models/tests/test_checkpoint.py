"""Checkpoints: upstream schema, safe loading (no code execution), atomic writes, compatibility."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo_models import CheckpointError, LibreYOLO, LibreYOLO9
from libreyolo_models.checkpoint import atomic_save, load_checkpoint

MARKER = Path(__file__).parent / "__pwned_marker__"


def _touch_marker(path: str) -> None:  # what a malicious pickle would run
    Path(path).write_text("pwned")


class _Evil:
    def __reduce__(self):  # noqa: ANN204
        return (_touch_marker, (str(MARKER),))


@pytest.fixture(scope="module")
def small_model() -> LibreYOLO:
    return LibreYOLO9(size="t", nc=3, names=["a", "b", "c"], imgsz=256)


def test_saved_checkpoint_has_the_upstream_schema(small_model, tmp_path) -> None:
    ckpt = load_checkpoint(small_model.save(tmp_path / "m.pt"))
    assert {"model", "schema_version", "libreyolo_version", "model_family", "size", "task", "nc", "names",
            "imgsz"} <= set(ckpt)
    assert (ckpt["schema_version"], ckpt["model_family"], ckpt["size"], ckpt["task"]) == ("1.0", "yolo9", "t", "detect")
    assert ckpt["names"] == {0: "a", 1: "b", 2: "c"} and ckpt["nc"] == 3 and ckpt["imgsz"] == 256


def test_round_trip_restores_weights_and_metadata(small_model, tmp_path) -> None:
    path = small_model.save(tmp_path / "m.pt")
    loaded = LibreYOLO(path)
    assert isinstance(loaded, LibreYOLO) and loaded.spec.name == "yolo9"
    assert (loaded.size, loaded.nc, loaded.names, loaded.imgsz) == ("t", 3, {0: "a", 1: "b", 2: "c"}, 256)
    for (k, a), (_, b) in zip(small_model.net.state_dict().items(), loaded.net.state_dict().items()):
        assert torch.equal(a, b), k


def test_malicious_pickle_is_refused_and_never_executed(tmp_path) -> None:
    MARKER.unlink(missing_ok=True)
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": _Evil()}, path)
    with pytest.raises(CheckpointError, match="refusing to load.*run code"):
        LibreYOLO9(path)
    assert not MARKER.exists()


def test_upstream_style_checkpoint_with_prefixes_loads_without_remapping(small_model, tmp_path) -> None:
    state = {f"module.{k}": v for k, v in small_model.net.state_dict().items()}
    state = {k.replace("module.head.", "module.detect."): v for k, v in state.items()}
    state["head.dfl.conv.weight"] = torch.zeros(1, 16, 1, 1)
    path = tmp_path / "legacy.pt"
    torch.save({"model": state, "model_family": "yolo9", "size": "t", "nc": 3}, path)
    loaded = LibreYOLO9(path)
    assert torch.equal(loaded.net.head.cv3[0][2].bias, small_model.net.head.cv3[0][2].bias)


def test_bare_state_dict_infers_size_and_classes(small_model, tmp_path) -> None:
    path = tmp_path / "bare.pt"
    torch.save(small_model.net.state_dict(), path)
    loaded = LibreYOLO9(path)
    assert (loaded.size, loaded.nc) == ("t", 3)


def test_checkpoint_of_another_family_is_rejected(small_model, tmp_path) -> None:
    ckpt = small_model.state_for_checkpoint()
    ckpt["model_family"] = "notafamily"
    path = tmp_path / "other.pt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match="family 'notafamily', which this version"):
        LibreYOLO9(path)


def test_wrong_size_weights_give_a_clear_error(small_model, tmp_path) -> None:
    ckpt = small_model.state_for_checkpoint()
    ckpt["size"] = "s"
    path = tmp_path / "mislabelled.pt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError, match="do not fit YOLOv9-s"):
        LibreYOLO9(path)


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch) -> None:
    path = atomic_save({"v": torch.ones(2)}, tmp_path / "c.pt")

    def broken_save(obj, fh):  # noqa: ANN001
        fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        atomic_save({"v": torch.zeros(2)}, path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["v"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_truncated_checkpoint_is_reported_with_its_path(small_model, tmp_path) -> None:
    path = small_model.save(tmp_path / "cut.pt")
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="cut.pt"):
        LibreYOLO9(path)


def test_host_copies_detach_and_standardise_every_tensor_of_a_nested_state() -> None:
    from collections import namedtuple

    from libreyolo_models.checkpoint import host_copies

    Pair = namedtuple("Pair", "a b")
    weight = torch.randn(4, 3, 2, 2, requires_grad=True).contiguous(memory_format=torch.channels_last)
    tree = {"state": {0: {"momentum_buffer": weight.detach()}}, "groups": [{"lr": 0.1, "params": [0]}],
            "betas": (0.9, 0.999), "pair": Pair(weight, 3), "note": "x", "w": weight}
    out = host_copies(tree)
    assert out["groups"] == tree["groups"] and out["betas"] == (0.9, 0.999) and out["note"] == "x"
    assert isinstance(out["pair"], Pair) and out["pair"].b == 3
    for copied in (out["w"], out["pair"].a, out["state"][0]["momentum_buffer"]):
        assert torch.equal(copied, weight.detach()) and not copied.requires_grad
        assert copied.is_contiguous() and copied.data_ptr() != weight.data_ptr()  # NCHW, its own memory


@pytest.mark.cuda
def test_host_copies_of_gpu_tensors_wait_once_and_hold_the_values() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from libreyolo_models.checkpoint import host_copies

    src = [torch.randn(64, 8, 3, 3, device="cuda").contiguous(memory_format=torch.channels_last) for _ in range(50)]
    expected = [t.cpu().contiguous() for t in src]
    out = host_copies({"t": src})
    for t in src:
        t.add_(1)  # later device work does not reach the copies
    assert all(o.device.type == "cpu" and o.is_contiguous() and torch.equal(o, e) for o, e in zip(out["t"], expected))
