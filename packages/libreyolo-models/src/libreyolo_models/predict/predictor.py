"""The predict loop: frames -> device letterbox -> network (eager or graphed) -> the family's
post-processing -> the task's ``Results``, one batch at a time.

Where each step runs, and why:

- decoding (and pinning, on CUDA) happens on a prefetch thread, ``PREFETCH_BATCHES`` batches
  ahead, so the next batch decodes while this one is on the GPU (``predict.prefetch``); on CUDA
  a video file decodes on a thread of its own, a batch ahead of the one that pins (``DECODE_AHEAD``); the
  first batch decodes on the caller's thread (nothing to overlap yet: a one-image call pays no
  thread hop); JPEG files, on CUDA with TorchCodec installed, are only read there and decode on
  the GPU at the start of their batch, all in one call (``predict.gpu_jpeg``);
- uint8 pixels are uploaded as they are and letterboxed, scaled and laid out on the device
  (``Task.prepare_batch``, by default ``data.letterbox_images.letterbox_batch``; a task whose
  preprocessing is still a CPU function, such as classify's centre crop, overrides it);
- per-phase times are CUDA events, not synchronisations (``predict.timing``), and a batch's
  predictions reach the host in one copy (``Task.predictions_to_host``);
- per-result side effects (saving images and videos, logging) live in ``Predictor._emit``.

``stream=True`` yields results as batches finish (see ``predict.streams`` for the stream API);
``stream=False`` collects them into a list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..compiled import compile_mode
from ..data.image_files import ShrunkImage
from ..devices import default_device, describe_device
from ..errors import ConfigError, SourceError
from ..graphs import forward_for_predict
from ..rundir import next_run_dir
from ..settings import AUTO_MASK_OPTIONS, PredictConfig
from ..tasks.results import Results, ResultsList
from ..tensor_trees import map_tensors
from .detect_modes import DetectModes
from .gpu_jpeg import decode_on_device, resolve_gpu_decode
from .outputs import PredictOutputs, wants_run_dir
from .planar import planar_to_rgb
from .prefetch import Prefetcher
from .sources import SourceReport
from .staging import PinnedStaging, Slot, host_tensors
from .streams import Frame, SourcePlan, open_source
from .timing import PhaseClock
from .video import VideoWriter

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

PREFETCH_BATCHES = 2
"""Batches decoded ahead of the one on the device (bounds the memory a long source holds)."""
DECODE_AHEAD = True
"""On CUDA, a video file's frames decode on a thread of their own, up to a batch ahead of the
prefetch thread, which copies them into the pinned batch buffers. FFmpeg's decoding threads work
only while their caller asks for frames, so on one thread the decoder idled while each batch was
copied (32 1080p frames: about 100 MB). Costs the memory of up to one batch and one frame of
decoded frames (the queue, and the frame the thread holds while the queue is full). A batch's
``decode`` time is then what the prefetch thread waited for frames, plus the copy: the decoding
that overlapped the previous batch is not in it."""
PLANAR_CHUNK = 4
"""Video frames converted to RGB on the device per call (``predict.planar``): a 1080p frame's
float32 intermediates take about 50 MB, so a batch of 32 at once would hold 1.6 GB."""


@dataclass
class FrameBatch:
    """Frames decoded on the prefetch thread, with their pixels as (pinned) uint8 tensors;
    ``decode_ms``: the prefetch thread's time on them (see ``DECODE_AHEAD``); ``slot``: the pinned
    batch buffer holding them, to release once their upload is queued."""

    frames: list[Frame]
    pixels: list[Tensor]
    decode_ms: float
    slot: Slot | None = None


def _batches(frames: Iterator[Frame], size: int, *, staging: PinnedStaging | None = None
             ) -> Generator[FrameBatch, None, None]:
    """Group frames into batches (runs on the prefetch thread, which also closes the source);
    with ``staging`` (CUDA) their pixels land in pinned memory, for asynchronous uploads. A frame
    left encoded (``Frame.encoded``) has no pixels yet: ``run_batch`` decodes it on the device; a
    planar one (``Frame.planar``) travels as its yuv420p planes, which ``run_batch`` converts there.
    A decoding error ends the frames after the batch of those decoded before it."""
    try:
        while True:
            started = time.perf_counter()
            chunk: list[Frame] = []
            failure: Exception | None = None
            try:
                chunk.extend(islice(frames, size))
            except Exception as err:  # noqa: BLE001 - raised again once the frames before it are out
                failure = err
            if not chunk:
                if failure is not None:
                    raise failure
                return
            slot = None
            if staging is not None and all(f.encoded is None for f in chunk):
                pixels, slot = staging.stage([f.planar if f.planar is not None else f.image for f in chunk])
            else:  # on the CPU, or some frames still encoded (their pixels: empty, run_batch decodes them)
                pixels = host_tensors([f.planar.planes[..., None] if f.planar is not None else f.image for f in chunk])
            yield FrameBatch(chunk, pixels, (time.perf_counter() - started) * 1e3, slot)
            if failure is not None:  # the frames decoded before the error went out first
                raise failure
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()


def run_prediction(model: ModelHandle, source: object, cfg: PredictConfig) -> ResultsList | Iterator[Results]:
    """Predict every image or frame of ``source``; batches of ``cfg.batch`` share one forward pass.

    Returns a generator of ``Results`` with ``cfg.stream``, else a ``ResultsList``. Unreadable
    items of a folder, glob or list are skipped with a warning naming each (``predict.sources``),
    listed on the list's ``skipped``.
    """
    report = SourceReport()
    device = default_device(cfg.device, model.device, model.runs_only_on)
    imgsz = model.resolve_imgsz(cfg.imgsz)
    # Image files decode for the letterbox they feed: a large JPEG at a reduced DCT scale (on the
    # CPU resized straight to its letterbox size: the image cache's pixels; on CUDA the letterbox
    # resizes it), its full picture kept for Results.orig_img; or, on CUDA with TorchCodec, JPEGs
    # decode on the GPU (predict.gpu_jpeg).
    shrink_to = imgsz if model.task_spec.reduced_decode and cfg.tile is None else None  # tiles need every pixel
    # Saving, cropping or showing needs every full picture on the host anyway: "auto" then lets the
    # CPU decode it once, rather than the GPU for the network and the CPU again for orig_img.
    pictures = cfg.save or cfg.save_crop or cfg.show
    if cfg.gpu_decode is True and shrink_to is None:
        raise ConfigError(f"gpu_decode=True: a {model.task_spec.name} model's preprocessing reads the full picture on "
                          "the CPU, so its JPEGs cannot decode on the GPU; leave gpu_decode at 'auto'")
    gpu_jpeg = (resolve_gpu_decode(cfg.gpu_decode, device) and shrink_to is not None
                and (cfg.gpu_decode is True or not pictures))
    # Video frames likewise become RGB on the GPU (predict.planar), unless every full frame is
    # wanted on the host anyway, or gpu_decode=False keeps all decoding there.
    planar_video = device.type == "cuda" and shrink_to is not None and not pictures and cfg.gpu_decode is not False
    plan = open_source(source, vid_stride=cfg.vid_stride, report=report, shrink_to=shrink_to, gpu_jpeg=gpu_jpeg,
                       planar_video=planar_video, resize_on_host=device.type != "cuda")
    if plan.is_live and not cfg.stream:
        raise ConfigError(f"source={source!r} is a camera or network stream, which never ends, so a list of its "
                          "results would grow without bound; pass stream=True and iterate the results")
    predictor = Predictor(model, cfg, device=device, imgsz=imgsz)
    results = predictor.stream(plan, report)
    return results if cfg.stream else ResultsList(list(results), report.skipped)


class Predictor:
    """One ``predict()`` call's resolved plan (device, dtype, image size, forward) and its loop.

    ``device`` and ``imgsz`` come resolved (``run_prediction``: the jobs' default-device policy
    and the model's image size); nothing here derives them again."""

    def __init__(self, model: ModelHandle, cfg: PredictConfig, *, device: torch.device, imgsz: int) -> None:
        model.to(device)
        log.info("predict on %s", describe_device(model.device))
        fusing = model.wants_fuse(cfg.fuse)
        if fusing:  # before the cast: BatchNorm folds from fp32 statistics, then rounds once
            model.fused_net()
        if cfg.half:
            model.half()
        self.model, self.cfg = model, cfg
        self.imgsz = imgsz
        self.task = model.task_spec
        prompt_options = [name for name in ("points", "boxes", "labels", "mask_input", *AUTO_MASK_OPTIONS)
                          if getattr(cfg, name) is not None]
        if prompt_options and not self.task.prompted:
            raise ConfigError(
                f"{prompt_options[0]}= is an option of a promptable segmenter (task 'prompt-segment', e.g. "
                f"LibreSAMb.pt); this {model.spec.name} model's task is {model.task!r}")
        self.options = self.task.postprocess_options(vars(cfg))
        if cfg.classes is not None:
            bad = [c for c in cfg.classes if not 0 <= c < model.nc]
            if bad:
                raise ConfigError(f"classes={cfg.classes}: class id {bad[0]} is not one of this model's "
                                  f"{model.nc} classes (0..{model.nc - 1})")
        # the fused copy (its channels_last twin for fp16 on CUDA), or the exact network (fuse=False)
        self.net = model.inference_net(fusing)
        if self.net is model.net:
            ensure_eval(model.net)
        elif self.net.training:  # built in eval mode; only a caller's .train() changes that
            self.net.eval()
        compiling = compile_mode(cfg.compile, cfg.cuda_graph)
        if compiling is not None:
            model.require_pytorch(f"compile={cfg.compile!r}")
        self.forward = model.family.predict_forward(self.net, forward_for_predict(model, cfg.cuda_graph, self.net,
                                                                                  compiling))
        self.detect_modes = DetectModes(model, cfg, self.forward, self.options, imgsz, pad_rows)  # tile=, augment=
        self.save_dir = next_run_dir(cfg.project, cfg.name, exist_ok=cfg.exist_ok) if wants_run_dir(cfg) else None
        self.outputs = PredictOutputs(cfg, self.save_dir)  # labels, crops, windows (predict.outputs)
        self.names = dict(model.names)
        self._writers: dict[str, VideoWriter] = {}
        self._staging: PinnedStaging | None = None
        self._saved_names: set[str] = set()
        self._full_batch_ran = False  # a later, shorter batch is padded to cfg.batch (pad_rows)
        self.report = SourceReport()  # where a file the device could not decode is skipped

    def stream(self, plan: SourcePlan, report: SourceReport | None = None) -> Iterator[Results]:
        """Results of every frame of ``plan`` in order, one batch at a time (``report``: what the
        source skipped, summarised at the end)."""
        device = self.model.device
        if report is not None:
            self.report = report
        produced = 0
        # Pinned batch buffers, reused: in flight are the batch on the device, the prefetched
        # ones and the one being filled.
        self._staging = PinnedStaging(PREFETCH_BATCHES + 2) if device.type == "cuda" else None
        source = _batches(self._frames(plan), self.cfg.batch, staging=self._staging)
        batches = Prefetcher(source, depth=PREFETCH_BATCHES)
        try:
            # The first batch decodes here: nothing runs yet that it could overlap, and a thread
            # hop would only add latency to a one-image call (starting a thread costs up to a
            # GIL switch interval, 5 ms). The thread takes over the source before that batch
            # runs, so the next ones decode while it is on the device.
            first = next(source, None)
            if first is not None:
                more = plan.count is None or plan.count > self.cfg.batch
                if more:  # a one-batch source (one image at batch 1) never starts the thread
                    batches.start()
                for res in self.run_batch(first):
                    produced += 1
                    yield res
                for batch in batches if more else source:
                    for res in self.run_batch(batch):
                        produced += 1
                        yield res
            if produced == 0 and plan.count and self.report.skipped:  # files, all of them unreadable
                name, reason = self.report.skipped[0]
                raise SourceError(f"none of the {self.report.seen} images could be read (first: {name}: {reason})")
        finally:
            batches.close()
            if not batches.started:  # an empty or failing source: the thread never owned it
                source.close()
            for writer in self._writers.values():
                writer.close()
            if self.save_dir is not None:
                log.info("predictions saved to %s", self.save_dir)
            if report is not None and report.skipped:
                log.warning("%d input(s) skipped as unreadable (each named above); results for the rest",
                            len(report.skipped))

    def run_batch(self, batch: FrameBatch) -> list[Results]:
        """One forward pass over ``batch``: upload, letterbox, network, post-process, results."""
        model, task = self.model, self.task
        clock = PhaseClock(model.device)
        full = len(batch.frames) == self.cfg.batch  # as it arrived: a file skipped below does not change it
        if any(f.encoded is not None for f in batch.frames):
            batch = self._decode_on_device(batch)
            if not batch.frames:
                self._full_batch_ran |= full
                return []
            clock.mark("decode")
        if any(f.planar is not None for f in batch.frames):
            batch = self._planar_to_rgb(batch)
            clock.mark("decode")
        if model.device.type == "cuda" and task.reduced_decode:  # the task letterboxes on the device
            batch = self._upload(batch)
        n = len(batch.frames)
        if self.detect_modes.tiled is not None:  # every picture whole on the device, then its windows
            pictures = [p.to(model.device, non_blocking=True) for p in batch.pixels]
            batch.pixels.clear()
            self._release(batch)
            clock.mark("preprocess")
            predictions, infos = self.detect_modes.run_tiled(pictures)   # windows' forward and merge
            clock.mark("inference")
            return self._finish(batch, clock, predictions, infos)
        x, infos = task.prepare_batch(batch.pixels, self.imgsz, model.dtype, model.device,
                                      [f.orig_shape for f in batch.frames])
        batch.pixels.clear()  # the uploaded or device-decoded pictures: not needed past the letterbox
        self._release(batch)
        if self.detect_modes.augment:   # every variant in one forward, then the merge
            self._full_batch_ran |= full
            clock.mark("preprocess")
            predictions = self.detect_modes.run_augmented(x)
            clock.mark("inference")
            return self._finish(batch, clock, predictions, infos)
        padded = (self._full_batch_ran or full) and n < self.cfg.batch
        if padded:
            x = pad_rows(x, self.cfg.batch)
        clock.mark("preprocess")
        with torch.inference_mode():
            out = self.forward(x)
            if padded:
                out = map_tensors(out, lambda t: t[:n])
        self._full_batch_ran |= full
        clock.mark("inference")
        return self._finish(batch, clock, model.family.predict_postprocess(self.net, out, self.options, infos), infos)

    def _release(self, batch: FrameBatch) -> None:
        """Hand the batch's pinned buffer back: its uploads are queued."""
        if batch.slot is not None and self._staging is not None:
            self._staging.release(batch.slot, torch.cuda.current_stream(self.model.device))
            batch.slot = None

    def _finish(self, batch: FrameBatch, clock: PhaseClock, predictions: Any, infos: list[Any]) -> list[Results]:
        """Post-processed ``predictions`` of ``batch`` -> its ``Results`` (with per-phase times)."""
        task, n = self.task, len(batch.frames)
        predictions = task.predictions_to_host(predictions)
        clock.mark("postprocess")
        phases = clock.ms()
        speed = {"decode": (batch.decode_ms + phases.pop("decode", 0.0)) / n, **{k: v / n for k, v in phases.items()}}
        results = []
        for frame, prediction, info in zip(batch.frames, predictions, infos):
            res = task.make_results(frame.image, frame.name, self.names, prediction, info, dict(speed))
            if frame.encoded is not None:  # orig_img: decoded on the CPU from the bytes, if someone looks
                res.defer_orig_img(ShrunkImage(frame.image, frame.encoded.orig_shape, frame.name, frame.encoded.data))
            elif frame.full is not None:  # orig_img: the full picture, decoded if someone looks
                res.defer_orig_img(frame.full)
            elif frame.planar is not None:  # orig_img: the frame converted on the host, if someone looks
                res.defer_orig_img(frame.planar)
            res.source, res.frame, res.fps = frame.source, frame.frame, frame.fps
            self._emit(res, frame)
            results.append(res)
        return results

    def _frames(self, plan: SourcePlan) -> Iterator[Frame]:
        """``plan``'s frames, for ``_batches``: for one video file on CUDA, from a decoding thread
        of their own (``DECODE_AHEAD``; ``_batches`` closing this closes the thread and the video)."""
        if not (DECODE_AHEAD and self._staging is not None and plan.one_video and self.cfg.batch > 1):
            return plan.frames
        return iter(Prefetcher(plan.frames, depth=self.cfg.batch, name="libreyolo-decode"))

    def _planar_to_rgb(self, batch: FrameBatch) -> FrameBatch:
        """``batch`` with its planar video frames uploaded and converted to RGB on the model's device:
        a batch staged in one pinned buffer (a video's frames) in one upload and a few conversions
        of ``PLANAR_CHUNK`` frames each, any other frame by itself."""
        device, frames = self.model.device, batch.frames
        kinds = {(f.planar.orig_shape, f.planar.colour) if f.planar is not None else None for f in frames}
        planes = self._slot_on_device(batch) if len(kinds) == 1 and None not in kinds else None
        if planes is not None:
            ((shape, colour),) = kinds  # type: ignore[misc]
            rgb = torch.cat([planar_to_rgb(planes[i:i + PLANAR_CHUNK], shape, colour)
                             for i in range(0, len(frames), PLANAR_CHUNK)])
            return FrameBatch(frames, list(rgb.unbind(0)), batch.decode_ms, batch.slot)
        pixels = list(batch.pixels)
        for i, frame in enumerate(frames):
            if frame.planar is not None:
                planes = pixels[i].to(device, non_blocking=True)
                pixels[i] = planar_to_rgb(planes, frame.planar.orig_shape, frame.planar.colour)
        return FrameBatch(frames, pixels, batch.decode_ms, batch.slot)

    def _upload(self, batch: FrameBatch) -> FrameBatch:
        """``batch``'s host pixels uploaded to the model's device: a batch staged in one pinned
        buffer (one image, a folder of same-size photos) in one copy, any other picture by itself.
        A reduced decode handed over as PIL holds it, RGB and a padding byte
        (``data.image_files.ShrunkImage``), loses the padding there."""
        rows = self._slot_on_device(batch)
        if rows is not None:
            return FrameBatch(batch.frames, list(_unpadded(rows).unbind(0)), batch.decode_ms, batch.slot)
        device = self.model.device
        uploaded = [_unpadded(p.to(device, non_blocking=True)) if p.device.type == "cpu" else p for p in batch.pixels]
        return FrameBatch(batch.frames, uploaded, batch.decode_ms, batch.slot)

    def _slot_on_device(self, batch: FrameBatch) -> Tensor | None:
        """The batch's pinned buffer uploaded in one copy, when its rows are the batch's frames,
        in order, still on the host; else None (uploaded picture by picture)."""
        slot = batch.slot
        if slot is None or slot.key[0] != len(batch.frames) or any(p.device.type != "cpu" for p in batch.pixels):
            return None
        return slot.buffer.to(self.model.device, non_blocking=True)

    def _decode_on_device(self, batch: FrameBatch) -> FrameBatch:
        """``batch`` with its encoded JPEGs decoded on the model's device in one call; a file that
        cannot be decoded at all is skipped with a warning (an error when it was the whole source)."""
        encoded = [i for i, f in enumerate(batch.frames) if f.encoded is not None]
        decoded = decode_on_device([batch.frames[i].encoded for i in encoded], self.model.device)  # type: ignore[misc]
        pixels = list(batch.pixels)
        failed: set[int] = set()
        for i, image in zip(encoded, decoded):
            if isinstance(image, Tensor):
                pixels[i] = image
                continue
            if batch.frames[i].encoded.alone:  # type: ignore[union-attr]
                raise image
            self.report.skip(image.name, image.reason)
            failed.add(i)
        keep = [i for i in range(len(pixels)) if i not in failed]
        return FrameBatch([batch.frames[i] for i in keep], [pixels[i] for i in keep], batch.decode_ms, batch.slot)

    def _emit(self, res: Results, frame: Frame) -> None:
        """Side effects of one result: save it (image, or a frame of the source's video), its labels,
        crops and window (``predict.outputs``), and log it."""
        stem = Path(frame.name).stem or "stream"
        if self.save_dir is not None:
            if frame.frame is None:
                name = _unique_name(stem, self._saved_names, ".jpg")
                stem = name[: -len(".jpg")]  # labels and crops share the image's (unique) name
                if self.cfg.save:
                    res.save(self.save_dir / name)
            else:
                if self.cfg.save:
                    writer = self._writers.get(frame.source)
                    if writer is None:
                        path = self.save_dir / _unique_name(stem, self._saved_names, ".mp4")
                        writer = VideoWriter(path, frame.fps)
                        self._writers[frame.source] = writer
                    writer.write(res.plot())
                stem = f"{stem}_{frame.frame}"  # one label file per frame: video_12.txt
        self.outputs.handle(res, stem)
        if self.cfg.verbose:
            where = res.source if res.frame is None else f"{res.source} frame {res.frame}"
            log.info("%s: %s (%.1f ms)", where, res.summary(), res.speed.get("inference", 0.0))


def _unpadded(pixels: Tensor) -> Tensor:
    """``[..., 3]`` RGB of pixels that may carry PIL's padding byte (``[..., 4]``): a view, no
    kernel (the letterbox's stack or paste reads it strided)."""
    return pixels[..., :3] if pixels.shape[-1] == 4 else pixels


def pad_rows(x: Tensor, rows: int) -> Tensor:
    """``x`` with rows of zeros appended up to ``rows``, in ``x``'s memory layout.

    The last batch of a folder or video is usually shorter than the others. Run at its own size it
    would make a graphed predict capture (and keep) one more graph for a single call, a stall at
    the end of every source and one more graph pool per tail length; padded, it replays the full
    batch's graph. Eager pads the same way, so the graph still replays exactly the eager call; the
    padded rows' outputs are dropped before post-processing (every family's inference outputs
    have the batch as their first dimension)."""
    shape = (rows, *x.shape[1:])
    strides = [0] * x.dim()
    step = 1
    for dim in sorted(range(x.dim()), key=x.stride):  # innermost first: x's own order of dimensions
        strides[dim] = step
        step *= shape[dim]
    # Laid out explicitly: torch.cat on CUDA turns a channels_last batch contiguous, whose graph
    # would then be another one (a graph is keyed by strides).
    out = torch.empty_strided(shape, strides, dtype=x.dtype, device=x.device)
    out[: x.shape[0]].copy_(x)
    out[x.shape[0]:].zero_()
    return out


def ensure_eval(net: torch.nn.Module) -> None:
    """Put ``net`` in eval mode unless every module already is: ``eval()`` assigns a flag on each
    of YOLOv9-t's 1,089 modules through ``Module.__setattr__`` (milliseconds per predict call);
    reading the flags costs a fraction of that."""
    stack = [net]
    while stack:
        module = stack.pop()
        if module.training:
            net.eval()
            return
        stack.extend(m for m in module._modules.values() if m is not None)


def _unique_name(stem: str, used: set[str], suffix: str) -> str:
    """``stem.jpg``, or ``stem_2.jpg``, ``stem_3.jpg``... when inputs share a name (no overwrites)."""
    name, n = f"{stem}{suffix}", 1
    while name in used:
        n += 1
        name = f"{stem}_{n}{suffix}"
    used.add(name)
    return name


__all__ = ["FrameBatch", "Predictor", "ensure_eval", "pad_rows", "run_prediction"]
