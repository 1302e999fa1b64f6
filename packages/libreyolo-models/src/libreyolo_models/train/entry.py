"""``model.train(...)``: options and resume resolved into a plan, then ``libreyolo_ddp.launch``
decides where each rank runs (this process, spawned workers for ``device="0,1"``, or the
processes torchrun started). The zoo never starts processes or joins groups itself.

It returns the outcome and the handle that trained in this process (a new one when the seed,
the dataset's classes or a restart rebuilt the network); the facade then loads the best weights.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import libreyolo_ddp

from ..errors import ConfigError
from ..handle import ModelHandle
from .adapt import initialize_from_seed
from .autobatch import resolve_batch
from .checkpoints import is_training_checkpoint
from .elastic import restart_checkpoint
from .plan import TrainPlan, resolve_plan
from .pretrained import load_pretrained
from .resume import merge_resume_options
from .trainer import Trainer, TrainOutcome

log = logging.getLogger(__name__)


def train_model(model: ModelHandle, options: Mapping[str, Any]) -> tuple[TrainOutcome, ModelHandle]:
    """Train ``model`` (see ``train.settings.TrainConfig``): the outcome, and the handle holding
    this process's trained network (``model`` itself when it trained in place or in workers)."""
    source = "train()"
    if model.task_spec.training_refusal is not None:
        raise ConfigError(model.task_spec.training_refusal)
    if model.quantization is not None:
        raise ConfigError(f"{source}: the model is quantized ({model.quantization.recipe!r}) for inference; call "
                          "model.dequantize() to train its fp32 weights")
    options = dict(options)
    callbacks = options.pop("callbacks", None)
    resume = None
    if options.get("resume"):
        if not is_training_checkpoint(model.checkpoint) and "run_dir" in model.checkpoint:
            last = Path(str(model.checkpoint["run_dir"])) / "weights" / "last.pt"
            if model.ckpt_path is None and not last.is_file():
                raise ConfigError(f"{source}: this model holds the best epoch's weights of {last.parent.parent}, "
                                  "trained with save=False, which wrote no last.pt: there is nothing to resume from; "
                                  "train again without resume=True")
            raise ConfigError(f"{source}: {model.ckpt_path} holds the best epoch's weights only (no optimizer "
                              f"state); resume from the run's last.pt: LibreYOLO({str(last)!r}).train(resume=True)")
        if not is_training_checkpoint(model.checkpoint):
            raise ConfigError(f"{source}: resume=True needs a model loaded from a training checkpoint, e.g. "
                              "LibreYOLO('runs/train/exp/weights/last.pt').train(resume=True); "
                              f"this model came from {model.ckpt_path or 'an architecture spec'}")
        resume = dict(model.checkpoint)
        options = merge_resume_options(resume, options, source)
    plan = resolve_plan(model, options, source, resumed=resume is not None)
    spawns = plan.devices.is_distributed and not libreyolo_ddp.is_torchrun()
    if spawns and not model.spec.ddp_autospawn:
        raise ConfigError(
            f"{model.spec.display_name} does not support device={plan.cfg.device!r} from model.train() "
            "(auto-spawn is not verified for this family). Run the same script under torchrun instead: "
            f"torchrun --nproc_per_node={plan.world_size} your_script.py")
    if spawns and not plan.cfg.save:
        raise ConfigError(
            f"save=False with device={plan.cfg.device!r}: the trained weights come back from the spawned workers "
            "only through best.pt, and save=False writes none. Keep save=True, or run the script under torchrun "
            f"(torchrun --nproc_per_node={plan.world_size} your_script.py), where every process keeps its weights")
    model = initialize_from_seed(model, plan.cfg.seed)
    if plan.cfg.pretrained and resume is None:
        load_pretrained(model, plan.cfg.pretrained)
    outcome: TrainOutcome = libreyolo_ddp.launch(
        train_rank, (model, plan, callbacks, resume), devices=plan.devices, entry="model.train()",
        arg_names=("model", "plan", "callbacks", "resume"))
    trained, outcome.trained = outcome.trained or model, None
    return outcome, trained


def train_rank(model: ModelHandle, plan: TrainPlan, callbacks: list[Callable[..., Any]] | None,
               resume: dict[str, Any] | None) -> TrainOutcome:
    """One rank's training (the whole run in one process). Spawned workers receive ``model`` as
    its checkpoint (``ModelHandle.__reduce__``); the outcome carries the handle that trained
    (``TrainOutcome.trained``, which never crosses a process boundary)."""
    env = libreyolo_ddp.dist_env()
    if env.world_size > 1:
        libreyolo_ddp.configure_rank_logging(env.rank)
    restart = restart_checkpoint(plan.cfg.project) if resume is None else None
    if restart is not None:  # torchrun restarted the job after a rank died: carry on from last.pt
        model = ModelHandle.from_checkpoint(restart, restart.pop("_path"))
        resume = restart
        given = {k: v for k, v in plan.cfg.as_dict().items() if k != "resume"}  # this attempt's options
        plan = resolve_plan(model, merge_resume_options(restart, given, "train() (restart)"), "train() (restart)",
                            resumed=True)
    plan = resolve_batch(model, plan)
    trainer = Trainer(model, plan, callbacks=callbacks, resume=resume)
    outcome = trainer.run()
    outcome.trained = trainer.model
    libreyolo_ddp.barrier()  # rank 0 has written best.pt before anyone reads it
    return outcome
