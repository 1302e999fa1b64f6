"""``model.train(...)``: options and resume resolved into a plan, then ``libreyolo_ddp.launch``
decides where each rank runs (this process, spawned workers for ``device="0,1"``, or the
processes torchrun started). The zoo never starts processes or joins groups itself.

The caller's model ends holding the best weights in every case.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import libreyolo_ddp

from ..errors import ConfigError
from ..zoo.building import rebuild_source
from .adapt import initialize_from_seed
from .autobatch import resolve_batch
from .checkpoints import is_training_checkpoint
from .elastic import restart_checkpoint
from .plan import TrainPlan, resolve_plan
from .pretrained import load_pretrained
from .resume import merge_resume_options
from .trainer import Trainer, TrainOutcome

if TYPE_CHECKING:
    from ..facade import LibreYOLO

log = logging.getLogger(__name__)


def train_model(model: LibreYOLO, options: Mapping[str, Any]) -> TrainOutcome:
    options = dict(options)
    callbacks = options.pop("callbacks", None)
    source = "train()"
    resume = None
    if options.get("resume"):
        if not is_training_checkpoint(model.checkpoint):
            raise ConfigError(f"{source}: resume=True needs a model loaded from a training checkpoint, e.g. "
                              "LibreYOLO('runs/train/exp/weights/last.pt').train(resume=True); "
                              f"this model came from {model.ckpt_path or 'an architecture spec'}")
        resume = model.checkpoint
        options = merge_resume_options(resume, options, source)
    plan = resolve_plan(model, options, source, resumed=resume is not None)
    spawns = plan.devices.is_distributed and not libreyolo_ddp.is_torchrun()
    if spawns and not model.spec.ddp_autospawn:
        raise ConfigError(
            f"{model.spec.display_name} does not support device={plan.cfg.device!r} from model.train() "
            "(auto-spawn is not verified for this family). Run the same script under torchrun instead: "
            f"torchrun --nproc_per_node={plan.world_size} your_script.py")
    initialize_from_seed(model, plan.cfg.seed)
    if plan.cfg.pretrained and resume is None:
        load_pretrained(model, plan.cfg.pretrained)
    outcome: TrainOutcome = libreyolo_ddp.launch(
        train_rank, (model, plan, callbacks, resume), devices=plan.devices, entry="model.train()",
        arg_names=("model", "plan", "callbacks", "resume"))
    _load_best(model, outcome)
    return outcome


def train_rank(model: LibreYOLO, plan: TrainPlan, callbacks: list[Callable[..., Any]] | None,
               resume: dict[str, Any] | None) -> TrainOutcome:
    """One rank's training (the whole run in one process). Spawned workers receive ``model`` as
    its checkpoint (``LibreYOLO.__reduce__``)."""
    env = libreyolo_ddp.dist_env()
    if env.world_size > 1:
        libreyolo_ddp.configure_rank_logging(env.rank)
    restart = restart_checkpoint(plan.cfg.project) if resume is None else None
    if restart is not None:  # torchrun restarted the job after a rank died: carry on from last.pt
        model._assemble(rebuild_source(restart, restart.pop("_path")))
        model.checkpoint = resume = restart
        given = {k: v for k, v in plan.cfg.as_dict().items() if k != "resume"}  # this attempt's options
        plan = resolve_plan(model, merge_resume_options(restart, given, "train() (restart)"), "train() (restart)",
                            resumed=True)
    plan = resolve_batch(model, plan)
    outcome = Trainer(model, plan, callbacks=callbacks, resume=resume).run()
    libreyolo_ddp.barrier()  # rank 0 has written best.pt before anyone reads it
    return outcome


def _load_best(model: LibreYOLO, outcome: TrainOutcome) -> None:
    """Put the best (EMA) weights into the caller's instance, on the device it was on."""
    best = outcome.best or outcome.last
    if best is None or not Path(best).is_file():
        return
    device = model.device
    model.load(best)
    model.to(device)
    log.info("model now holds the best weights: %s", best)
