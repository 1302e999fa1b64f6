"""Video frames kept in yuv420p and converted on the device (``predict.planar``): the conversion
stays within swscale's rounding, ``orig_img`` is exactly the host path's frame, frames of other
formats stay RGB, and predict through the planar path gives the host path's results. On the CPU
the planar path is asked for explicitly (``open_source(planar_video=True)``); predict turns it on
by itself on CUDA only, where the GPU test compares it with the host conversion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo_models import LibreYOLO9
from libreyolo_models.predict.planar import PlanarFrame, planar_frame, planar_to_rgb
from libreyolo_models.predict.video import iter_video

av = pytest.importorskip("av")

IMGSZ = 64


def write_video(path: Path, size: tuple[int, int], pix_fmt: str = "yuv420p", n: int = 6) -> Path:
    """A short video of smooth colour ramps (chroma that varies) with a bright moving square."""
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        for i in range(n):
            img = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy + 40 * i) % 256], -1).astype(np.uint8)
            img[8:24, 4 + 3 * i:20 + 3 * i] = (240, 230, 40)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def assert_same_confident_boxes(a, b, conf: float = 0.3, margin: float = 0.1) -> None:  # noqa: ANN001
    """The network saw pixels within 2 grey levels of each other: a detection scored near the
    threshold may fall either side of it, but every one clearly above it is in both, within a pixel."""
    assert a.boxes is not None and b.boxes is not None
    for one, other in ((a, b), (b, a)):
        sure = one.boxes.xyxy[one.boxes.conf >= conf + margin]
        for box in sure:
            assert len(other.boxes) and (other.boxes.xyxy - box).abs().amax(1).min() <= 1.0, box
    assert abs(len(a.boxes) - len(b.boxes)) <= max(1, len(a.boxes) // 4)


def decoded_frames(path: Path, with_planes: bool = False) -> list:
    with av.open(str(path)) as container:
        frames = list(container.decode(container.streams.video[0]))
        if with_planes:
            return [(f.to_ndarray(format="yuv420p"), planar_frame(f)) for f in frames]
        return [(f.to_ndarray(format="rgb24"), planar_frame(f)) for f in frames]


@pytest.mark.parametrize("size", [(48, 64), (50, 66)], ids=["rows-multiple-of-4", "rows-2-mod-4"])
def test_planes_copied_from_the_decoder_equal_pyavs_array_in_a_batch_buffer_and_after_pickling(tmp_path, size) -> None:
    """The planes are read from the decoder's buffers (rows padded to its alignment) straight into
    predict's batch buffer: the same bytes as ``to_ndarray("yuv420p")``; a pickled frame carries them."""
    import pickle

    from libreyolo_models.predict.staging import PinnedStaging, Slot

    frames = decoded_frames(write_video(tmp_path / "clip.mp4", size), with_planes=True)
    for reference, planar in frames:
        assert np.array_equal(planar.planes, reference)
        again = pickle.loads(pickle.dumps(planar))
        assert isinstance(again.frame, np.ndarray) and np.array_equal(again.planes, reference)
        assert np.array_equal(again.full(), planar.full()) and again.orig_shape == planar.orig_shape
    staging = PinnedStaging(2)
    staging._take = lambda key: Slot(torch.full(key, 7, dtype=torch.uint8))  # type: ignore[method-assign]  # no pinning off CUDA
    pixels, slot = staging.stage([planar for _, planar in frames])
    assert slot is not None and tuple(slot.buffer.shape) == (len(frames), size[0] * 3 // 2, size[1], 1)
    for row, (reference, _) in zip(pixels, frames):
        assert torch.equal(row[..., 0], torch.from_numpy(reference))
    batched = planar_to_rgb(slot.buffer, size)  # a batch converts as its frames one by one
    assert batched.shape == (len(frames), *size, 3)
    for one, row in zip(batched, pixels):
        assert torch.equal(one, planar_to_rgb(row, size))


@pytest.mark.parametrize("size", [(48, 64), (50, 66)], ids=["rows-multiple-of-4", "rows-2-mod-4"])
def test_the_device_conversion_stays_within_swscales_rounding_and_orig_img_is_the_host_frame(tmp_path, size) -> None:
    frames = decoded_frames(write_video(tmp_path / "clip.mp4", size))
    assert frames
    for rgb, planar in frames:
        assert isinstance(planar, PlanarFrame) and planar.orig_shape == size
        assert planar.planes.shape == (size[0] * 3 // 2, size[1]) and planar.planes.dtype == np.uint8
        assert np.array_equal(planar.full(), rgb)  # Results.orig_img: the host path's pixels exactly
        for planes in (torch.from_numpy(planar.planes), torch.from_numpy(planar.planes)[..., None]):
            out = planar_to_rgb(planes, planar.orig_shape)
            assert out.shape == (*size, 3) and out.dtype == torch.uint8
            diff = np.abs(out.numpy().astype(np.int16) - rgb.astype(np.int16))
            assert diff.max() <= 2 and diff.mean() < 1.0, (diff.max(), diff.mean())


follows_tags = pytest.mark.skipif(int(av.__version__.split(".")[0]) < 17,
                                  reason="PyAV before 17 converts every yuv420p frame as BT.601 in video range")


@follows_tags
@pytest.mark.parametrize("colour", [(1, 0), (1, 1), (2, 2), (1, 2), (5, 1), (6, 0)],
                         ids=["bt709", "bt709-video-range", "bt601-full-range", "bt709-full-range", "bt470bg",
                              "smpte170m"])
def test_a_tagged_frame_converts_with_its_tags_as_swscale_does(tmp_path, colour) -> None:
    """A frame's colorspace and color_range tags choose swscale's conversion (BT.709 against the
    untagged BT.601 moved these pixels by up to 24 grey levels, full range by 34): the device
    conversion follows them, and a pickled frame's ``orig_img`` keeps them."""
    import pickle

    with av.open(str(write_video(tmp_path / "clip.mp4", (48, 64)))) as container:
        frames = list(container.decode(container.streams.video[0]))
    for frame in frames:
        frame.colorspace, frame.color_range = colour
        planar = planar_frame(frame)
        assert planar is not None and planar.colour == colour
        host = frame.to_ndarray(format="rgb24")
        out = planar_to_rgb(torch.from_numpy(planar.planes), planar.orig_shape, planar.colour).numpy()
        diff = np.abs(out.astype(np.int16) - host.astype(np.int16))
        assert diff.max() <= 2 and diff.mean() < 1.0, (diff.max(), diff.mean())
        assert np.array_equal(pickle.loads(pickle.dumps(planar)).full(), host)
    untagged = planar_to_rgb(torch.from_numpy(planar.planes), planar.orig_shape).numpy()
    if colour[0] == 1 or colour[1] == 2:  # a different conversion indeed
        assert np.abs(untagged.astype(np.int16) - host.astype(np.int16)).max() > 2


@follows_tags
def test_frames_tagged_with_a_matrix_it_does_not_follow_convert_on_the_host(tmp_path) -> None:
    with av.open(str(write_video(tmp_path / "clip.mp4", (48, 64)))) as container:
        frame = next(container.decode(container.streams.video[0]))
    for colorspace in (0, 3, 4, 7, 8, 9, 10):  # RGB, reserved, FCC, SMPTE 240M, YCgCo, BT.2020
        frame.colorspace, frame.color_range = colorspace, 0
        assert planar_frame(frame) is None
    frame.colorspace, frame.color_range = 2, 3  # no such range
    assert planar_frame(frame) is None
    frame.colorspace, frame.color_range = 2, 0
    assert planar_frame(frame) is not None


def test_before_pyav_17_every_frame_is_taken_as_untagged_as_the_host_conversion_takes_it(
        tmp_path, monkeypatch) -> None:
    from libreyolo_models.predict import planar

    monkeypatch.setattr(planar, "_host_follows_tags", lambda: False)
    with av.open(str(write_video(tmp_path / "clip.mp4", (48, 64)))) as container:
        frame = next(container.decode(container.streams.video[0]))
    frame.colorspace, frame.color_range = 9, 2  # BT.2020, full range: ignored there
    kept = planar_frame(frame)
    assert kept is not None and kept.colour == planar.UNTAGGED


def test_a_batch_of_frames_with_different_tags_converts_each_with_its_own(tmp_path) -> None:
    """One pinned buffer holding frames of two tags (two videos in one batch): each converts with
    its own (``Predictor._planar_to_rgb`` on a model on the CPU)."""
    from types import SimpleNamespace

    from libreyolo_models.predict.predictor import FrameBatch, Predictor
    from libreyolo_models.predict.staging import Slot
    from libreyolo_models.predict.streams import Frame

    with av.open(str(write_video(tmp_path / "clip.mp4", (48, 64)))) as container:
        planes = next(container.decode(container.streams.video[0])).to_ndarray(format="yuv420p")
    frames = [PlanarFrame(planes, (48, 64)), PlanarFrame(planes, (48, 64), (1, 2))]
    buffer = torch.from_numpy(np.stack([planes, planes]))[..., None]
    batch = FrameBatch([Frame(np.empty((0, 0, 3), np.uint8), "a", 0, "a", planar=f) for f in frames],
                       list(buffer.unbind(0)), 1.0, Slot(buffer))
    fake = SimpleNamespace(model=SimpleNamespace(device=torch.device("cpu")))
    fake._slot_on_device = lambda batch: Predictor._slot_on_device(fake, batch)  # type: ignore[arg-type]
    out = Predictor._planar_to_rgb(fake, batch)  # type: ignore[arg-type]
    for pixels, frame in zip(out.pixels, frames):
        assert torch.equal(pixels, planar_to_rgb(torch.from_numpy(planes), (48, 64), frame.colour))
    assert not torch.equal(out.pixels[0], out.pixels[1])


def test_only_yuv420p_frames_stay_planar(tmp_path) -> None:
    kept = [image for image, _, _ in iter_video(str(write_video(tmp_path / "a.mp4", (48, 64))), source="a",
                                                 planar=True)]
    assert kept and all(isinstance(image, PlanarFrame) for image in kept)
    if "libx264" not in av.codecs_available:
        pytest.skip("no libx264 here to write a 4:4:4 video")
    other = [image for image, _, _ in iter_video(str(write_video(tmp_path / "b.mp4", (48, 64), "yuv444p")),
                                                  source="b", planar=True)]
    assert other and all(isinstance(image, np.ndarray) and image.shape == (48, 64, 3) for image in other)
    plain = [image for image, _, _ in iter_video(str(tmp_path / "a.mp4"), source="a")]
    assert all(isinstance(image, np.ndarray) for image in plain)  # planar is asked for, never the default


def test_predict_through_planar_frames_gives_the_host_paths_results(tmp_path) -> None:
    from libreyolo_models.predict.predictor import Predictor
    from libreyolo_models.predict.streams import open_source
    from libreyolo_models.settings import PredictConfig

    video = write_video(tmp_path / "clip.mp4", (48, 64))
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ, device="cpu")
    with torch.no_grad():
        for seq in model.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2]))
    host = list(model(video, stream=True, batch=4, conf=0.3))
    cfg = PredictConfig(batch=4, conf=0.3, stream=True, device="cpu")
    plan = open_source(str(video), shrink_to=IMGSZ, planar_video=True)
    planar = list(Predictor(model, cfg, device=torch.device("cpu"), imgsz=IMGSZ).stream(plan))
    assert [r.frame for r in planar] == [r.frame for r in host] == list(range(len(host)))
    for a, b in zip(host, planar):
        assert a.orig_shape == b.orig_shape == (48, 64)
        assert np.array_equal(a.orig_img, b.orig_img)  # converted on the host when read
        assert "decode" in b.speed
        assert_same_confident_boxes(a, b)


@pytest.mark.cuda
def test_on_cuda_video_frames_turn_rgb_on_the_gpu_and_agree_with_the_host_path(tmp_path, open_source_calls) -> None:
    from libreyolo_models.predict import predictor
    from libreyolo_models.predict.streams import open_source
    from libreyolo_models.settings import PredictConfig

    video = write_video(tmp_path / "clip.mp4", (48, 64))
    torch.manual_seed(0)
    model = LibreYOLO9(size="t", nc=3, imgsz=IMGSZ, device=0)
    with torch.no_grad():
        for seq in model.net.head.cv3:
            seq[-1].bias.copy_(torch.tensor([0.3, 0.7, 0.2], device="cuda"))
    gpu = list(model(video, stream=True, batch=4, conf=0.3, device=0))
    assert [call.get("planar_video") for call in open_source_calls] == [True]
    cfg = PredictConfig(batch=4, conf=0.3, stream=True, device=0)
    plan = open_source(str(video), shrink_to=IMGSZ, planar_video=False)
    host = list(predictor.Predictor(model, cfg, device=torch.device("cuda", 0), imgsz=IMGSZ).stream(plan))
    assert [r.frame for r in gpu] == [r.frame for r in host]
    for a, b in zip(host, gpu):
        assert np.array_equal(a.orig_img, b.orig_img)
        assert_same_confident_boxes(a, b)
