"""SAM: Meta's checkpoint layout for every size (a manifest written from the official code,
``sam_layout.py``), the network on a tiny test-side configuration, the embedding cache, the
inference-only refusals, and the graphed encoder on a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO
from libreyolo_models.contract.classifier_spec import IMAGENET_MEAN, IMAGENET_STD
from libreyolo_models.errors import ConfigError
from libreyolo_models.families.sam import nn as sam_nn
from libreyolo_models.families.sam.encoder import relative_table
from libreyolo_models.families.sam.family import SamFamily
from libreyolo_models.families.sam.nn import ARCHS, Sam, SamArch

from .sam_layout import OFFICIAL, official_layout
from .sam_numerics import DEPTH, GLOBAL, HEADS, SIDE, WIDTH, fill_state, reference_input

MANIFEST = Path(__file__).parent / "data" / "upstream" / "sam-vit_b-manifest.tsv"
VECTORS = Path(__file__).parent / "data" / "upstream" / "vectors-sam-tiny.npz"
TINY = SamArch(32, 2, 2, (1,), grid=4, window=2)  # 64 px inputs: 4 x 4 patches, 2 x 2 windows


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> SamArch:
    """Size ``b`` built as a 2-block, 32-wide encoder (the prompt side is the published one)."""
    monkeypatch.setitem(sam_nn.ARCHS, "b", TINY)
    return TINY


def picture(h: int = 48, w: int = 80, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def meta_state(arch: SamArch) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        return Sam(arch, IMAGENET_MEAN, IMAGENET_STD).state_dict()


def test_vit_b_matches_the_manifest_key_for_key() -> None:
    rows = [line.split("\t") for line in MANIFEST.read_text().splitlines()]
    expected = [(key, tuple(int(n) for n in shape.split("x"))) for key, shape in rows]
    assert expected == official_layout("b")  # the file is what the rules say
    state = meta_state(ARCHS["b"])
    assert [(k, tuple(v.shape)) for k, v in state.items()] == expected
    assert all(v.dtype == torch.float32 for v in state.values())


@pytest.mark.parametrize("size", ["l", "h"])
def test_larger_sizes_match_the_official_layout(size: str) -> None:
    width, depth, heads, global_blocks = OFFICIAL[size]
    arch = ARCHS[size]
    assert (arch.width, arch.depth, arch.heads, arch.global_blocks) == (width, depth, heads, global_blocks)
    state = meta_state(arch)
    assert [(k, tuple(v.shape)) for k, v in state.items()] == official_layout(size)
    assert SamFamily.infer_size(state, "prompt-segment") == size


def test_parameter_counts() -> None:
    """93.7M / 312.3M / 641.1M: what the official layout adds up to (the Gaussian matrix is a buffer)."""
    counts = {}
    for size, arch in ARCHS.items():
        with torch.device("meta"):
            counts[size] = sum(p.numel() for p in Sam(arch, IMAGENET_MEAN, IMAGENET_STD).parameters())
    assert counts == {"b": 93_735_472, "l": 312_342_832, "h": 641_090_608}


def test_pixel_statistics_stay_out_of_the_state_dict() -> None:
    """Meta's files hold no pixel mean/std (non-persistent there too); ours are the same values / 255."""
    state = meta_state(ARCHS["b"])
    assert not any("normalize" in k or "pixel" in k for k in state)
    assert np.allclose(np.array(IMAGENET_MEAN) * 255, (123.675, 116.28, 103.53))
    assert np.allclose(np.array(IMAGENET_STD) * 255, (58.395, 57.12, 57.375))


def test_a_bare_official_state_dict_loads_by_family(tiny: SamArch, tmp_path: Path) -> None:
    """An official file is a bare state dict: it loads with family='sam', size read from its width."""
    torch.manual_seed(0)
    source = Sam(TINY, IMAGENET_MEAN, IMAGENET_STD).state_dict()
    path = tmp_path / "sam_tiny.pth"
    torch.save(source, path)
    assert SamFamily.infer_size(source, "prompt-segment") == "b"  # the width of (patched) size b
    model = LibreYOLO(str(path), family="sam")
    assert model.task == "prompt-segment" and model.size == "b"
    assert all(torch.equal(model.net.state_dict()[k], v) for k, v in source.items())
    renamed = tmp_path / "LibreSAMb.pt"  # the official file under our name: the name says the family
    torch.save(source, renamed)
    model = LibreYOLO(str(renamed))
    assert model.spec.name == "sam" and model.task == "prompt-segment"
    assert all(torch.equal(model.net.state_dict()[k], v) for k, v in source.items())


def test_forward_and_decoder_match_the_official_code() -> None:
    """Encoder and prompt decoding against vectors the official code wrote with the same weights
    (``sam_numerics``). Given upstream's normalised input the encoder is upstream's to within the
    CPU's float32 kernels (bit for bit on the CPU that wrote the vectors; 1.3e-5 apart on one with
    AMX and AVX512-FP16, whose matmul kernels sum in another order); through our own normalisation
    of [0, 1] pixels (``(x / 255 - m) / s`` rather than upstream's ``(x - 255 m) / (255 s)``) the
    embedding moves by float32 rounding, amplified to ~2e-5."""
    ref = np.load(VECTORS)
    net = Sam(SamArch(WIDTH, DEPTH, HEADS, GLOBAL, grid=SIDE // 16), IMAGENET_MEAN, IMAGENET_STD).eval()
    net.load_state_dict(fill_state(net.state_dict()))
    pixels = torch.from_numpy(reference_input()).permute(2, 0, 1).float()
    h, w = pixels.shape[1:]
    upstream = torch.zeros(1, 3, SIDE, SIDE)
    upstream[0, :, :h, :w] = ((pixels - torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1))
                              / torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1))
    ours = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1).expand(1, 3, SIDE, SIDE).clone()
    ours[:, :, :h, :w] = pixels / 255
    with torch.inference_mode():
        np.testing.assert_allclose(net.image_encoder(upstream).numpy(), ref["embedding"], atol=5e-5, rtol=0)
        np.testing.assert_allclose(net(ours).numpy(), ref["embedding"], atol=1e-4, rtol=0)
        embedding = torch.from_numpy(ref["embedding"])
        points = (torch.tensor([[[40.0, 50.0], [200.0, 100.0]]]), torch.tensor([[1, 0]]))
        box = torch.tensor([[20.0, 30.0, 180.0, 150.0]])
        for name, pts, boxes in [("points", points, None), ("box", None, box),
                                 ("points_box", (points[0][:, :1], points[1][:, :1]), box)]:
            for multimask in (True, False):
                logits, iou = net.decode(embedding, pts, boxes, (SIDE, SIDE), multimask)
                tag = f"{name}_{'multi' if multimask else 'single'}"
                np.testing.assert_allclose(logits.numpy(), ref[f"{tag}_logits"], atol=1e-5, rtol=0, err_msg=tag)
                np.testing.assert_allclose(iou.numpy(), ref[f"{tag}_iou"], atol=1e-6, rtol=0, err_msg=tag)


def test_relative_table_resamples_like_upstream() -> None:
    """At the learned side the table is indexed by offset; at another side it is resampled first."""
    table = torch.arange(7 * 2, dtype=torch.float32).view(7, 2)
    picked = relative_table(4, 4, table)
    assert picked.shape == (4, 4, 2)
    assert torch.equal(picked[0, 0], table[3]) and torch.equal(picked[3, 0], table[6]) and torch.equal(picked[0, 3], table[0])
    assert relative_table(2, 2, table).shape == (2, 2, 2)


def test_encoder_output_and_pad_is_zero_after_normalisation(tiny: SamArch) -> None:
    model = LibreYOLO(family="sam", size="b")
    net = model.net.eval()
    x = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1).expand(1, 3, 64, 64).clone()
    assert torch.count_nonzero(net.normalize(x)) == 0  # the mean pad is exactly zero, as upstream's pad
    with torch.inference_mode():
        assert net(x).shape == (1, 256, 4, 4)


def test_embeddings_are_cached_per_picture(tiny: SamArch) -> None:
    model = LibreYOLO(family="sam", size="b")
    calls: list[int] = []
    model.net.image_encoder.register_forward_hook(lambda *_: calls.append(1))
    image = picture()
    first = model(image, imgsz=64, points=[[10, 20]])[0]
    second = model(image, imgsz=64, boxes=[[5, 5, 40, 30]])[0]
    assert len(calls) == 1 and model.family.embeddings.hits == 1
    assert first.masks.data.shape == (1, 3, 48, 80) and second.masks.data.shape == (1, 3, 48, 80)
    model(picture(seed=1), imgsz=64, points=[[10, 20]])  # another picture: encoded
    assert len(calls) == 2
    with torch.no_grad():
        model.net.image_encoder.neck[1].bias.add_(1.0)  # new weights: the cache must not answer
    model(image, imgsz=64, points=[[10, 20]])
    assert len(calls) == 3


def test_inference_only_and_no_graphs_on_cpu(tiny: SamArch) -> None:
    model = LibreYOLO(family="sam", size="b")
    with pytest.raises(ConfigError, match="pretrained-only"):
        model.train(data="shapes", epochs=1)
    with pytest.raises(ConfigError, match="shapes-inst"):  # val scores masks: an instance-segmentation set
        model.val(data="shapes")
    assert model.spec.task(model.task).inference_capture  # its parity row is green
    with pytest.raises(ConfigError, match="CUDA GPU"):
        model(picture(), imgsz=64, points=[[1, 1]], cuda_graph=True)


@pytest.mark.cuda
def test_graphed_encoder_equals_eager_bit_for_bit_and_hits_the_cache() -> None:
    model = LibreYOLO(family="sam", size="b", device=0)
    image = picture(480, 640)
    eager = model(image, points=[[320, 240]])[0]
    model.family.embeddings.clear()  # else the eager entry answers and nothing is captured
    graphed = model(image, points=[[320, 240]], cuda_graph=True)[0]
    assert model.graph_info()["graphs"], "the encoder was not captured"
    assert torch.equal(torch.as_tensor(eager.masks.logits), torch.as_tensor(graphed.masks.logits))
    assert torch.equal(torch.as_tensor(eager.masks.data), torch.as_tensor(graphed.masks.data))
    hits = model.family.embeddings.hits
    model(image, boxes=[[100, 100, 300, 300]], cuda_graph=True)
    assert model.family.embeddings.hits == hits + 1
