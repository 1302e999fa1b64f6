"""The weights' moving average: one update per tensor, however many state-dict keys name it."""

from __future__ import annotations

import torch
from torch import nn

from libreyolo_models.train.ema import ModelEMA


class _Tied(nn.Module):
    """Three levels sharing one conv, as RTMDet's head does (three state-dict keys, one tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.levels = nn.ModuleList(nn.Sequential(nn.Conv2d(2, 2, 1, bias=False), nn.BatchNorm2d(2)) for _ in range(3))
        for level in self.levels[1:]:
            level[0] = self.levels[0][0]


def test_a_tensor_shared_under_three_keys_is_averaged_once_per_update() -> None:
    net = _Tied()
    assert len([k for k in net.state_dict() if k.endswith("0.weight")]) == 3
    ema = ModelEMA(net, decay=0.5, tau=1e-9)  # the decay ramps to 0.5 at once
    shared = ema.ema.levels[0][0].weight
    assert ema.ema.levels[2][0].weight is shared  # the copy keeps the sharing
    with torch.no_grad():
        shared.zero_()
        net.levels[0][0].weight.fill_(1.0)
        net.levels[1][1].running_var.fill_(3.0)
    ema.update(net)
    # One lerp: 0 -> 0.5. Once per key would give 1 - 0.5**3 = 0.875.
    torch.testing.assert_close(shared, torch.full_like(shared, 0.5))
    torch.testing.assert_close(ema.ema.levels[1][1].running_var, torch.full((2,), 2.0))  # untied: one lerp too


class _Masked(nn.Module):
    """A float buffer holding inf by construction, as the DETR decoders' anchor grid does."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)
        self.register_buffer("anchors", torch.tensor([0.5, float("inf"), -0.25]))


def test_an_inf_mask_buffer_is_copied_not_lerped_into_nan() -> None:
    net = _Masked()
    ema = ModelEMA(net, decay=0.5, tau=1e-9)
    for _ in range(3):
        ema.update(net)
    torch.testing.assert_close(ema.ema.anchors, net.anchors)  # inf - inf would have made NaN
    assert torch.isfinite(ema.ema.conv.weight).all()


def test_the_divergence_check_and_the_load_warning_leave_inf_masks_alone() -> None:
    from libreyolo_models.checkpoint import inf_by_design, nonfinite_entries

    state = _Masked().state_dict()
    masks = inf_by_design(state)
    assert masks == {"anchors"}
    assert nonfinite_entries(state) == ["anchors"]  # without the masks: flagged
    assert nonfinite_entries(state, masks) == []
    state["anchors"][0] = float("nan")  # a NaN is divergence even in a mask
    state["conv.weight"].fill_(float("inf"))
    assert nonfinite_entries(state, masks) == ["anchors", "conv.weight"]


def test_the_norm_screen_names_every_bad_tensor_and_passes_finite_values_whose_norm_overflows() -> None:
    """``nonfinite_entries`` screens with one norm per tensor; a norm can overflow on finite values
    (fp32 above ~1e19 squared, fp16 summing past 65504), and those must not be flagged."""
    from libreyolo_models.checkpoint import all_norms_finite, nonfinite_entries

    state = {"a": torch.randn(50), "big32": torch.full((4,), 1e30), "big16": torch.full((400,), 6e4).half(),
             "bf": torch.randn(7).bfloat16(), "steps": torch.tensor(3), "empty": torch.empty(0),
             "f8": torch.ones(3).to(torch.float8_e4m3fn)}  # no norm kernel: read one by one
    assert not all_norms_finite([state["big32"]]) and not all_norms_finite([state["big16"]])  # overflowed
    assert nonfinite_entries(state) == []  # ...yet nothing is flagged
    assert all_norms_finite([state["a"], state["bf"]]) and all_norms_finite([])
    state["a"][7], state["bf"][0], state["big16"][1] = float("nan"), float("-inf"), float("inf")
    assert nonfinite_entries(state) == ["a", "big16", "bf"]
