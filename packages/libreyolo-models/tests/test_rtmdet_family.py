"""RTMDet through the facade: names, the inference seam's decoding, checkpoints (ours and upstream's
layouts) and fusing with the head's shared convs."""

from __future__ import annotations

from pathlib import Path

import torch

from libreyolo_models import SAMPLE_IMAGE, LibreRTMDet, LibreYOLO
from libreyolo_models.zoo.registry import parse_model_name


def test_weight_names_resolve_to_the_family_and_size() -> None:
    parsed = parse_model_name("LibreRTMDetm.pt")
    assert (parsed.family.name, parsed.size, parsed.task) == ("rtmdet", "m", "detect")
    model = LibreYOLO("LibreRTMDett.yaml")
    assert (model.spec.name, model.size, model.imgsz, model.nc) == ("rtmdet", "t", 640, 80)
    assert LibreRTMDet(size="t", nc=2).spec.task("detect").loss_names == ("cls", "box")


def test_inference_seam_decodes_from_cell_corners_in_a_fixed_shape() -> None:
    model = LibreRTMDet(size="t", nc=2, imgsz=64).eval()
    with torch.no_grad():
        for conv in model.net.head.rtm_reg:  # distances l, t, r, b = (1, 2, 3, 4) * stride
            conv.weight.zero_()
            conv.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        for conv in model.net.head.rtm_cls:
            conv.weight.zero_()
            conv.bias.copy_(torch.tensor([0.0, 2.0]))
        out = model.inference_forward(torch.rand(2, 3, 64, 96))
    assert out.shape == (2, 4 + 2, 8 * 12 + 4 * 6 + 2 * 3)
    # Prior 13 of level 0 (stride 8, 12 columns) is cell (x=1, y=1): corner (8, 8).
    torch.testing.assert_close(out[0, :4, 13], torch.tensor([8 - 8.0, 8 - 16.0, 8 + 24.0, 8 + 32.0]))
    # The first prior of level 1 (stride 16) sits at (0, 0).
    torch.testing.assert_close(out[1, :4, 96], torch.tensor([-16.0, -32.0, 48.0, 64.0]))
    torch.testing.assert_close(out[:, 4:], torch.tensor([0.5, torch.sigmoid(torch.tensor(2.0))])[None, :, None]
                               .expand(2, 2, out.shape[2]))


def test_checkpoint_round_trip_keeps_every_tensor_and_the_predictions(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LibreRTMDet(size="t", nc=3, names=["a", "b", "c"], imgsz=64)
    with torch.no_grad():
        for conv in model.net.head.rtm_cls:
            conv.bias.fill_(0.5)
    path = model.save(tmp_path / "rt.pt")
    ckpt = torch.load(path, weights_only=True)
    assert (ckpt["model_family"], ckpt["size"], ckpt["nc"]) == ("rtmdet", "t", 3)
    assert list(ckpt["model"]) == list(model.net.state_dict())  # aliased head convs under every level
    again = LibreYOLO(path)
    for (key, a), (_, b) in zip(model.net.state_dict().items(), again.net.state_dict().items()):
        assert torch.equal(a, b), key
    assert again.net.head.cls_convs[2][1].conv.weight is again.net.head.cls_convs[0][1].conv.weight
    first = model(SAMPLE_IMAGE, conf=0.0, max_det=10)
    second = again(SAMPLE_IMAGE, conf=0.0, max_det=10)
    assert len(first[0]) == 10 and torch.equal(first[0].boxes.data, second[0].boxes.data)


def test_bare_upstream_state_dict_loads_with_mmdetection_names_and_level_0_convs_only(tmp_path: Path) -> None:
    torch.manual_seed(1)
    source = LibreRTMDet(size="s", nc=4)
    state = {("bbox_head." + k[len("head."):] if k.startswith("head.") else k): v
             for k, v in source.net.state_dict().items()
             if not (k.startswith(("head.cls_convs.1.", "head.cls_convs.2.", "head.reg_convs.1.", "head.reg_convs.2."))
                     and k.endswith(".conv.weight"))}
    path = tmp_path / "bare.pt"
    torch.save(state, path)
    loaded = LibreYOLO(path, family="rtmdet")
    assert (loaded.size, loaded.nc) == ("s", 4)  # read from the stem width and the class conv
    for (key, a), (_, b) in zip(source.net.state_dict().items(), loaded.net.state_dict().items()):
        assert torch.equal(a, b), key


def test_fused_network_predicts_what_the_unfused_one_does() -> None:
    torch.manual_seed(2)
    model = LibreRTMDet(size="t", nc=2, imgsz=64)
    model.net.train()
    with torch.no_grad():  # realistic BatchNorm statistics so folding has something to fold
        for _ in range(2):
            model.net.forward_rgb(torch.rand(2, 3, 64, 64))
    model.net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        before = model.inference_forward(x)
        model.fuse()
        fused = model.fused_net()  # the inference copy; model.net stays trainable
        after = model.inference_forward(x, fused)
    # Each level folds its own BatchNorm into its own copy of the shared conv; the model keeps one.
    assert fused.head.cls_convs[1][0].conv is not fused.head.cls_convs[0][0].conv
    assert model.net.head.cls_convs[1][0].conv is model.net.head.cls_convs[0][0].conv
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def test_capture_declarations_follow_the_green_parity_rows() -> None:
    decl = LibreRTMDet(size="t").spec.task("detect")
    assert decl.inference_capture and decl.train_capture  # docs/parity-matrix.md, third run of 2026-12-01
