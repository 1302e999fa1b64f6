"""The four classifier families: reference parameter counts for every size, reference state dicts
load and give the same logits, names and sizes read back, pretrained starts, the loss seam.

References: torchvision for ResNet and ConvNeXt; timm (a test-only dependency) for
EfficientNetV2-B (``tf_efficientnetv2_b*``: same layers, TF padding) and MobileNetV4-Conv.
Parameter counts are taken on the meta device: no memory, no time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
import torchvision

from libreyolo_models import CheckpointError, LibreYOLO, LossContext
from libreyolo_models.train.pretrained import load_pretrained
from libreyolo_models.zoo.registry import get_family, parse_model_name

REFERENCES = {
    ("resnet", "18"): lambda: torchvision.models.resnet18(),
    ("resnet", "34"): lambda: torchvision.models.resnet34(),
    ("resnet", "50"): lambda: torchvision.models.resnet50(),
    ("resnet", "101"): lambda: torchvision.models.resnet101(),
    ("convnext", "tiny"): lambda: torchvision.models.convnext_tiny(),
    ("convnext", "small"): lambda: torchvision.models.convnext_small(),
    ("convnext", "base"): lambda: torchvision.models.convnext_base(),
    **{("efficientnetv2", s): (lambda s=s: timm.create_model(f"tf_efficientnetv2_{s}")) for s in ("b0", "b1", "b2", "b3")},
    **{("mobilenetv4", s): (lambda s=s: timm.create_model(f"mobilenetv4_conv_{s}"))
       for s in ("small", "medium", "large")},
}


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _network(family: str, size: str, nc: int = 1000) -> torch.nn.Module:
    spec = get_family(family)
    return spec.family_class()(spec, size, "classify", nc).build_network()


def test_every_size_of_every_classifier_family_is_tested() -> None:
    declared = {(f, s) for f in ("resnet", "convnext", "efficientnetv2", "mobilenetv4") for s in get_family(f).sizes}
    assert declared == set(REFERENCES)


@pytest.mark.parametrize(("family", "size"), sorted(REFERENCES))
def test_parameter_count_and_state_layout_match_the_reference(family: str, size: str) -> None:
    with torch.device("meta"):
        ours, reference = _network(family, size), REFERENCES[family, size]()
    assert _count(ours) == _count(reference)
    if family != "efficientnetv2":  # timm's EfficientNet names its layers its own way
        theirs = reference.state_dict()
        assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {k: tuple(v.shape) for k, v in theirs.items()}
    spec = get_family(family)
    with torch.device("meta"):
        state = _network(family, size, nc=7).state_dict()
    impl = spec.family_class()
    assert impl.infer_size(state, "classify") == size and impl.infer_nc(state, "classify") == 7


@pytest.mark.parametrize(("family", "reference"), [("resnet", "resnet18"), ("convnext", "convnext_tiny"),
                                                   ("mobilenetv4", "mobilenetv4_conv_small")])
def test_a_reference_state_dict_loads_by_path_and_gives_the_same_logits(family: str, reference: str,
                                                                         tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = (getattr(torchvision.models, reference)() if family != "mobilenetv4"
           else timm.create_model(reference)).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so a wrong layout cannot hide
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    path = tmp_path / "reference.pt"
    torch.save(net.state_dict(), path)  # a bare state dict: no metadata at all
    model = LibreYOLO(path, family=family)
    assert (model.task, model.nc, model.size) == ("classify", 1000, get_family(family).default_size
                                                  if family != "resnet" else "18")
    images = torch.rand(2, 3, 64, 64)
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    model.net.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.inference_forward(images), net((images - mean) / std), rtol=1e-4, atol=1e-4)


def test_names_without_a_task_suffix_give_the_familys_task() -> None:
    for name, expected in (("LibreResNet50.yaml", ("resnet", "50")), ("LibreConvNeXttiny.pt", ("convnext", "tiny")),
                           ("LibreEfficientNetV2b3.pt", ("efficientnetv2", "b3")),
                           ("LibreMobileNetV4small.yaml", ("mobilenetv4", "small"))):
        parsed = parse_model_name(name)
        assert (parsed.family.name, parsed.size, parsed.task) == (*expected, "classify")
        assert parsed.family.weight_name(parsed.size, suffix=Path(name).suffix) == name
    assert parse_model_name("LibreYOLO9t.pt").task == "detect"  # detection names are unchanged


def test_pretrained_loads_all_but_the_class_outputs_and_names_what_does_not_fit(tmp_path: Path) -> None:
    reference = torchvision.models.resnet18()
    path = tmp_path / "resnet18.pt"
    torch.save(reference.state_dict(), path)
    model = LibreYOLO("LibreResNet18.yaml", nc=5)
    head_before = model.net.fc.weight.clone()
    assert load_pretrained(model, path) == len(reference.state_dict()) - 2
    assert torch.equal(model.net.conv1.weight, reference.conv1.weight)
    assert torch.equal(model.net.layer4[1].bn2.running_var, reference.layer4[1].bn2.running_var)
    assert torch.equal(model.net.fc.weight, head_before) and model.net.fc.weight.shape == (5, 512)
    other = tmp_path / "resnet34.pt"
    torch.save(torchvision.models.resnet34().state_dict(), other)
    with pytest.raises(CheckpointError, match=r"does not fit LibreResNet18 .*unexpected \(e.g. \['layer1.2"):
        load_pretrained(model, other)


@pytest.mark.parametrize(("family", "size"), [("resnet", "18"), ("efficientnetv2", "b0"), ("convnext", "tiny"),
                                              ("mobilenetv4", "small")])
def test_training_seam_and_loss_give_gradients_everywhere(family: str, size: str) -> None:
    torch.manual_seed(0)
    model = LibreYOLO(family=family, size=size, nc=3, imgsz=64)
    model.net.train()
    targets = model.family.sample_targets(2, 64, torch.Generator().manual_seed(0))
    assert targets.shape == (2, 3) and torch.equal(targets.sum(1), torch.ones(2))
    logits = model.training_forward(torch.rand(2, 3, 64, 64))
    result = model.family.compute_loss(logits, targets, LossContext(gains={"cls": 1.0}))
    result.total.backward()
    assert result.items.shape == (1,) and torch.isfinite(result.total)
    assert all(p.grad is not None for p in model.net.parameters())
    probs = model.family.postprocess(logits.detach(), None)
    assert len(probs) == 2 and torch.allclose(probs[0].sum(), torch.tensor(1.0))


def test_named_shortcuts_build_each_classifier_family() -> None:
    from libreyolo_models import LibreConvNeXt, LibreEfficientNetV2, LibreMobileNetV4, LibreResNet

    built = [make(size=size, nc=3) for make, size in
             ((LibreResNet, "18"), (LibreEfficientNetV2, "b0"), (LibreConvNeXt, "tiny"), (LibreMobileNetV4, "small"))]
    assert [(m.spec.name, m.size, m.task, m.nc) for m in built] == [
        ("resnet", "18", "classify", 3), ("efficientnetv2", "b0", "classify", 3), ("convnext", "tiny", "classify", 3),
        ("mobilenetv4", "small", "classify", 3)]
