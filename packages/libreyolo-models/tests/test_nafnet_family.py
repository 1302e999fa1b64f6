"""NAFNet: the official checkpoint layout of every size (the key rules written down in
docs/families/nafnet.md, rebuilt here from those rules alone), padding, the PSNR loss, tiled
inference, training steps, checkpoints and ``Results.image``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from libreyolo_models import SAMPLE_IMAGE, LibreYOLO, LossContext
from libreyolo_models.families.nafnet.family import NAFNetFamily, tile_overlap
from libreyolo_models.families.nafnet.loss import psnr_loss
from libreyolo_models.families.nafnet.nn import ARCHS, NAFNet
from libreyolo_models.layers.tiles import tiled_apply

# (width, encoder blocks, middle blocks, decoder blocks) of the official option files
OFFICIAL = {"sidd32": (32, (2, 2, 4, 8), 12, (2, 2, 2, 2)), "sidd64": (64, (2, 2, 4, 8), 12, (2, 2, 2, 2)),
            "gopro32": (32, (1, 1, 1, 28), 1, (1, 1, 1, 1)), "gopro64": (64, (1, 1, 1, 28), 1, (1, 1, 1, 1))}


def official_layout(width: int, enc: tuple[int, ...], middle: int, dec: tuple[int, ...]) -> list[tuple[str, tuple]]:
    """Every key and shape of an official NAFNet checkpoint, in its order (docs/families/nafnet.md)."""
    def conv(name: str, c_out: int, c_in: int, k: int, bias: bool = True) -> list[tuple[str, tuple]]:
        return [(f"{name}.weight", (c_out, c_in, k, k))] + ([(f"{name}.bias", (c_out,))] if bias else [])

    def block(name: str, c: int) -> list[tuple[str, tuple]]:
        return ([(f"{name}.beta", (1, c, 1, 1)), (f"{name}.gamma", (1, c, 1, 1))]
                + conv(f"{name}.conv1", 2 * c, c, 1) + conv(f"{name}.conv2", 2 * c, 1, 3) + conv(f"{name}.conv3", c, c, 1)
                + conv(f"{name}.sca.1", c, c, 1) + conv(f"{name}.conv4", 2 * c, c, 1) + conv(f"{name}.conv5", c, c, 1)
                + [(f"{name}.norm1.weight", (c,)), (f"{name}.norm1.bias", (c,)),
                   (f"{name}.norm2.weight", (c,)), (f"{name}.norm2.bias", (c,))])

    keys = conv("intro", width, 3, 3) + conv("ending", 3, width, 3)
    chans = [width * 2 ** i for i in range(len(enc))]
    for i, n in enumerate(enc):
        keys += [k for j in range(n) for k in block(f"encoders.{i}.{j}", chans[i])]
    for i, n in enumerate(dec):
        keys += [k for j in range(n) for k in block(f"decoders.{i}.{j}", chans[-1 - i])]
    keys += [k for j in range(middle) for k in block(f"middle_blks.{j}", 2 * chans[-1])]
    keys += [k for i in range(len(dec)) for k in conv(f"ups.{i}.0", 4 * chans[-1 - i], 2 * chans[-1 - i], 1, bias=False)]
    keys += [k for i in range(len(enc)) for k in conv(f"downs.{i}", 2 * chans[i], chans[i], 2)]
    return keys


@pytest.mark.parametrize("size", sorted(OFFICIAL))
def test_every_official_size_has_the_official_keys_shapes_and_order(size: str) -> None:
    width, enc, middle, dec = OFFICIAL[size]
    assert (ARCHS[size].width, ARCHS[size].enc_blocks, ARCHS[size].middle_blocks, ARCHS[size].dec_blocks) == OFFICIAL[size]
    with torch.device("meta"):
        state = NAFNet(ARCHS[size]).state_dict()
    expected = official_layout(width, enc, middle, dec)
    assert [(k, tuple(v.shape)) for k, v in state.items()] == expected
    assert all(v.dtype == torch.float32 for v in state.values())
    assert NAFNetFamily.infer_size({k: torch.empty(s, device="meta") for k, s in expected}, "restore") == size


def test_parameter_counts_of_the_official_sizes() -> None:
    counts = {size: sum(math.prod(s) for _, s in official_layout(*OFFICIAL[size])) for size in OFFICIAL}
    assert counts == {"sidd32": 29_159_715, "sidd64": 115_982_915, "gopro32": 17_111_907, "gopro64": 67_888_835}


def test_infer_nc_and_size_from_a_bare_state_dict() -> None:
    state = NAFNet(ARCHS["t"]).state_dict()
    assert NAFNetFamily.infer_nc(state, "restore") == 1 and NAFNetFamily.infer_size(state, "restore") == "t"
    with pytest.raises(Exception, match="intro.weight"):
        NAFNetFamily.infer_nc({"x": torch.zeros(1)}, "restore")


def test_any_size_in_gives_the_same_size_out() -> None:
    net = NAFNet(ARCHS["t"]).eval()
    with torch.no_grad():
        for h, w in ((37, 50), (16, 16), (65, 33)):
            assert net(torch.rand(1, 3, h, w)).shape == (1, 3, h, w)


def test_a_fresh_network_is_the_identity_plus_its_ending() -> None:
    """beta and gamma start at zero, so every block passes its input through: a fresh NAFNet
    outputs the input plus the ending conv of the (unchanged) intro features."""
    net = NAFNet(ARCHS["t"]).eval()
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        feats = net.intro(x)
        skips = []
        for down in net.downs:
            skips.append(feats)
            feats = down(feats)
        for up, skip in zip(net.ups, reversed(skips)):
            feats = up(feats) + skip
        torch.testing.assert_close(net(x), net.ending(feats) + x)


def test_psnr_loss_is_minus_the_psnr_of_each_image_averaged() -> None:
    target = torch.zeros(2, 3, 4, 4)
    restored = target.clone()
    restored[0] += 0.1                     # mse 0.01 -> 20 dB
    restored[1] += 0.01                    # mse 1e-4 -> 40 dB
    assert psnr_loss(restored, target).item() == pytest.approx(-30.0, abs=1e-3)  # float32 squares
    assert psnr_loss(target, target).item() == pytest.approx(-80.0, abs=1e-4)  # the 1e-8 floor
    with pytest.raises(ValueError, match="differ in shape"):
        psnr_loss(restored, target[:, :, :2])


def test_inference_is_the_network_when_the_picture_fits_and_tiled_beyond() -> None:
    model = LibreYOLO("LibreNAFNett.yaml", imgsz=32)
    family, net = model.family, model.net.eval()
    assert family.tile == 32 and tile_overlap(32) == 8
    small, large = torch.rand(2, 3, 32, 24), torch.rand(1, 3, 70, 50)
    with torch.no_grad():
        assert torch.equal(family.inference_forward(net, small), net(small))  # tiled == untiled when it fits
        torch.testing.assert_close(family.inference_forward(net, large), tiled_apply(net, large, 32, 8))
        assert family.inference_forward(net, large).shape == large.shape


def test_loss_falls_over_20_steps() -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreNAFNett.yaml", imgsz=32)
    family, net = model.family, model.net.train()
    clean = torch.rand(2, 3, 32, 32)
    noisy = (clean + 0.1 * torch.randn_like(clean)).clamp(0, 1)
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3)
    losses = []
    for _ in range(20):
        result = family.compute_loss(family.training_forward(net, noisy), clean, LossContext())
        opt.zero_grad()
        result.total.backward()
        opt.step()
        losses.append(result.total.item())
    assert losses[-1] < losses[0] - 1.0  # at least 1 dB better


def test_an_official_basicsr_file_loads_through_the_facade(tmp_path: Path) -> None:
    """BasicSR saves ``{"params": state_dict}``; the family and size come from the keys."""
    state = NAFNet(ARCHS["t"]).state_dict()
    path = tmp_path / "NAFNet-test.pth"
    torch.save({"params": state}, path)
    model = LibreYOLO(str(path), family="nafnet")
    assert (model.size, model.task, model.nc) == ("t", "restore", 1)
    assert all(torch.equal(model.net.state_dict()[k], v) for k, v in state.items())


def test_checkpoint_round_trip_and_predict_gives_the_restored_picture(tmp_path: Path) -> None:
    model = LibreYOLO("LibreNAFNett.yaml", imgsz=64)
    path = tmp_path / "nafnet.pt"
    model.save(str(path))
    again = LibreYOLO(str(path))
    assert (again.size, again.task, again.imgsz) == ("t", "restore", 64)
    result = again(SAMPLE_IMAGE)[0]
    assert result.boxes is None and result.image.shape == result.orig_shape == (360, 480)
    assert result.image.pixels().shape == (360, 480, 3) and result.summary() == "restored 480x360"
    ours = model(SAMPLE_IMAGE)[0].image.data
    assert torch.equal(ours, result.image.data)
    assert LibreYOLO(str(path), imgsz=512).family.tile == 512  # a larger tile: the sample goes through whole
