"""``model.track``: predict frame by frame, feed each frame's boxes to a tracker, save the
annotated frames (a video per video source) once ids are known."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import load_config, suggest
from ..errors import ConfigError
from ..predict.video import VideoWriter
from ..rundir import next_run_dir
from ..settings import PredictConfig
from ..tasks.results import Results
from .registry import get_tracker
from .session import TrackSession, sequence_key

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

TRACKABLE_TASKS = ("detect", "segment", "pose")
"""Tasks whose results carry boxes: their objects' masks and keypoints follow the tracked boxes."""


def start_tracking(model: ModelHandle, source: object, *, tracker: str, previous: TrackSession | None,
                   options: Mapping[str, Any]) -> tuple[TrackSession, Iterator[Results]]:
    """Check every option now (so a typo fails at the call, not at the first frame of a
    generator), then return the session (``previous`` continued when it fits, else a new one,
    for the facade to keep for ``persist=True``) and the lazy frame-by-frame tracking generator."""
    if model.task not in TRACKABLE_TASKS:
        raise ConfigError(f"model.track() follows detected boxes, and this {model.spec.name} model's task is "
                          f"{model.task!r}; use a detect model (segment and pose ones track too), e.g. "
                          "LibreYOLO('LibreYOLO9t.pt')")
    spec = get_tracker(tracker)
    tracker_keys = spec.option_names()
    predict_keys = {f.name for f in fields(PredictConfig)}
    for key in options:
        if key not in tracker_keys | predict_keys:
            raise ConfigError(f"track(): unknown option {key!r}{suggest(key, tracker_keys | predict_keys)}; "
                              f"tracker options: {', '.join(sorted(tracker_keys))}; the others are predict's")
    config: Any = load_config(spec.config, {k: v for k, v in options.items() if k in tracker_keys}, "track()")
    predict_options = {k: v for k, v in options.items() if k in predict_keys}
    cfg = load_config(PredictConfig, predict_options, "track()")   # checks values and types now
    user_conf = cfg.conf if "conf" in predict_options else None
    predict_options["save"] = False
    if spec.score_floor is not None:   # weak boxes must reach the tracker
        predict_options["conf"] = float(getattr(config, spec.score_floor))
    else:   # the tracker sees what predict keeps; nothing is filtered again
        user_conf = None
    session = previous
    if session is None or session.spec is not spec or session.config != config:
        session = TrackSession(spec, config)
    session.conf = user_conf   # this call's output filter, also on a continued session
    save_dir = next_run_dir(cfg.project if "project" in options else "runs/track", cfg.name,
                                exist_ok=cfg.exist_ok) if cfg.save else None
    return session, _track(session, predict_stream(model, source, predict_options), save_dir)


def predict_stream(model: ModelHandle, source: object, options: dict[str, Any]) -> Iterator[Results]:
    """Predict's lazy generator of one ``Results`` per frame (``stream=True``)."""
    from ..predict.predictor import run_prediction

    cfg = load_config(PredictConfig, {**options, "stream": True}, "track()")
    if cfg.cuda_graph is not False:
        model.require_pytorch(f"track(cuda_graph={cfg.cuda_graph!r})")
    return iter(run_prediction(model, source, cfg))


def _track(session: TrackSession, frames: Iterator[Results], save_dir: Path | None) -> Iterator[Results]:
    videos: dict[tuple[str, int], VideoWriter] = {}
    try:
        for res in frames:
            res = session(res)
            if save_dir is not None:
                _save(res, save_dir, videos, session.sequence)
            yield res
    finally:
        for video in videos.values():
            video.close()
        if save_dir is not None:
            log.info("tracking results saved to %s", save_dir)


def _save(res: Results, save_dir: Path, videos: dict[tuple[str, int], VideoWriter], sequence: int) -> None:
    """A video or stream frame is appended to its sequence's ``.mp4`` (``name.mp4``, then
    ``name-1.mp4``... when a name repeats); a still image is saved alone."""
    source = sequence_key(res)
    if source is None:
        res.save(save_dir / (Path(res.path).stem + ".jpg"))
        return
    key = (source, sequence)
    if key not in videos:
        name = f"{Path(source).stem or 'stream'}.mp4"
        if name in {v.path.name for v in videos.values()}:
            name = f"{Path(name).stem}-{len(videos)}.mp4"
        videos[key] = VideoWriter(save_dir / name, getattr(res, "fps", None))
    videos[key].write(res.plot())
