"""The training coordinator: epochs over small collaborators, one process's view of one rank.

DDP is plugged in at one place (``_wrap_for_training``: SyncBN + the DDP wrapper) and CUDA graphs
at another (``graph_forward``); everything else is the same single-device code path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import libreyolo_ddp

from ..atomic_write import remove_stale_temps
from ..checkpoint import cpu_state_dict
from ..contract.family import LossContext, has_training_head
from ..devices import describe_device
from ..errors import ConfigError
from ..tasks import EvalSettings
from ..tensor_trees import unpack_tensors
from ..workers import default_workers
from . import half_weights
from .adapt import adapt_to_classes, check_resume_classes
from .backend_flags import restored_backend_flags, set_autotune, set_deterministic
from .callbacks import (
    CallbackRunner,
    EpochEnd,
    PredictionImages,
    StepEnd,
    TrainEnd,
    TrainException,
    TrainStart,
)
from .checkpoints import best_weights, build_training_checkpoint, write_epoch_checkpoints
from .divergence import DivergenceWatch
from .elastic import forget_run
from .ema import ModelEMA
from .fit_options import OptionedTask, freeze_layers
from .grad_tools import LeanGradScaler
from .graph_forward import graph_forward, wants_graphs
from .loggers import enabled_loggers
from .loggers.images import first_images, prediction_images
from .optim import OptimizerChoice, build_optimizer, choose_optimizer, scale_backbone_groups
from .plan import TrainPlan
from .results_log import ResultsLog
from .run_folder import claim_training_folder, restore_missing_best
from .schedule import MIN_STEPS_PER_EPOCH, accumulate_steps, apply_lr, nominal_accumulation, warmup_iterations
from .start_plots import plot_start_of_training, plot_train_batch
from .step import SeamThenHead, StepTimer, TrainStep
from .val_loss import validation_loss

if TYPE_CHECKING:
    from ..handle import ModelHandle

log = logging.getLogger(__name__)

LOG_EVERY = 10
"""Iterations between progress-bar updates: the loss sums stay on the device and are read back
(one host sync) only this often, never per step."""


@dataclass
class TrainOutcome:
    """What ``model.train`` returns."""

    run_dir: Path
    best: Path | None             # weights/best.pt (EMA weights of the best epoch)
    last: Path | None             # weights/last.pt (everything needed to resume)
    metrics: dict[str, float] = field(default_factory=dict)
    epochs_run: int = 0
    stopped_early: bool = False
    trained: ModelHandle | None = field(default=None, repr=False, compare=False)
    """The handle that trained in this process, for the facade to take over; None once taken,
    and never pickled (a spawned rank sends the outcome back without its network)."""
    kept: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """``save=False``: what ``best.pt`` would have held (the best epoch's EMA weights and record),
    in memory, for the facade to load; None once taken, and never pickled."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "trained": None, "kept": None}

    def summary(self) -> str:
        shown = ", ".join(f"{k.split('/')[-1]}={v:.4f}" for k, v in self.metrics.items() if k.startswith("metrics/"))
        best = self.best if self.best is not None else "not written" if self.last is None else None
        return f"trained {self.epochs_run} epochs -> {self.run_dir}; best {best}; {shown}"


class Trainer:
    """Trains ``model`` in this process as this rank (a single device, or one rank of DDP)."""

    def __init__(self, model: ModelHandle, plan: TrainPlan, *, callbacks: list | None = None,
                 resume: dict[str, Any] | None = None) -> None:
        self.model, self.plan, self.cfg, self.resume = model, plan, plan.cfg, resume
        self.task = OptionedTask.for_training(model.task_spec, plan.cfg, model.stride)  # single_cls, fraction, rect
        self.env = libreyolo_ddp.dist_env()
        self.rank0 = self.env.rank == 0
        self.world = self.env.world_size
        loggers = enabled_loggers(plan.cfg) if self.rank0 else []  # rank 0 only: one run per experiment
        self.callbacks = CallbackRunner([*(callbacks or []), *loggers], enabled=self.rank0)
        self._logged_images: tuple[torch.Tensor, list[str]] | None = None

    # ------------------------------------------------------------------ setup
    SETUP_PHASES = ("data", "model", "pipelines", "optimizer", "run folder", "resume", "forward")
    """What ``setup_s`` times, in order: reading the dataset's lists and labels, moving the network
    to its device (CUDA's first use included), building the loaders (and any image cache), the
    optimizer with its EMA copy, the run folder (resolving it, its results log, and after the rest
    its arguments and start-of-training plots), restoring a checkpoint's state (0 unless resuming),
    and the training forward (capture, when graphed)."""

    @contextlib.contextmanager
    def _setup_phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.setup_s[name] = self.setup_s.get(name, 0.0) + time.perf_counter() - started

    def _setup(self) -> None:
        cfg, model, task = self.cfg, self.model, self.task
        self.setup_s: dict[str, float] = {}
        self.device = libreyolo_ddp.local_device() if self.world > 1 else self.plan.devices.torch_device(0)
        log.info("train on %s%s", describe_device(self.device), f" (rank {self.env.rank} of {self.world})" if self.world > 1 else "")
        libreyolo_ddp.seed_everything(cfg.seed)
        set_deterministic(cfg.deterministic)
        with self._setup_phase("data"):
            data = libreyolo_ddp.resolve_on_rank_zero(lambda: task.load_data(cfg.data))
            if self.resume is not None:
                check_resume_classes(model, data.nc, data.names, cfg.data)
            self.model = model = adapt_to_classes(model, data.nc, data.names,
                                                  keypoints=getattr(data, "keypoints", None))
            self.imgsz = self.plan.imgsz
            self.global_batch = self.plan.global_batch
            self.batch = libreyolo_ddp.split_global_batch(self.global_batch, self.world)
            has_val = task.has_split(data, "val")
            if cfg.val and not has_val:
                raise ConfigError(f"train(): data={cfg.data!r} has no val split, so val=True cannot validate; add "
                                  "a `val:` entry to the dataset, or pass val=False to train without validation")
            self.train_index = train_index = task.load_split(data, "train")
            val_index = task.load_split(data, "val") if has_val else None
        with self._setup_phase("model"):
            if cfg.num_queries is not None:  # before the EMA copy, so validation selects as many
                model.family.set_num_queries(model.net, cfg.num_queries)
            model.net.to(self.device).float()
            self.channels_last = self.device.type == "cuda" and cfg.channels_last in (True, "auto")
            if self.channels_last:  # before the EMA copy and the optimizer, so both see NHWC parameters
                model.net.to(memory_format=torch.channels_last)
        with self._setup_phase("pipelines"):
            workers = default_workers(cfg.workers, batch=self.batch, world_size=self.world)
            self.train_data = task.train_pipeline(train_index, imgsz=self.imgsz, batch_size=self.batch,
                                                  device=self.device, cfg=cfg, workers=workers)
            self.val_data = (task.val_pipeline(val_index, imgsz=self.imgsz, batch_size=self.batch * 2,
                                               device=self.device, workers=workers, cache=cfg.cache)
                             if val_index is not None else None)
        self.skipped = [*getattr(self.train_data, "skipped", ()), *getattr(self.val_data, "skipped", ())]
        self.n_batches = len(self.train_data)
        self.accumulate = nominal_accumulation(cfg.nbs, self.global_batch, self.n_batches)
        if self.accumulate < (nominal := nominal_accumulation(cfg.nbs, self.global_batch)):
            log.info("small dataset: %d batches an epoch, so gradients accumulate over %d instead of nbs/batch = %d: "
                     "%d optimizer steps an epoch instead of %d (up to %d, as many as the batches allow)",
                     self.n_batches, self.accumulate, nominal, math.ceil(self.n_batches / self.accumulate),
                     math.ceil(self.n_batches / nominal), MIN_STEPS_PER_EPOCH)
        weight_decay = cfg.weight_decay * self.global_batch * self.accumulate / cfg.nbs
        iterations = math.ceil(self.n_batches / self.accumulate) * cfg.epochs
        with self._setup_phase("optimizer"):
            freeze_layers(model.net, cfg.freeze)
            groups = model.family.parameter_groups(model.net, weight_decay=weight_decay)
            if cfg.backbone_lr_scale is not None:
                groups = scale_backbone_groups(model.net, groups, cfg.backbone_lr_scale, model.spec.display_name)
            saved_choice = (self.resume or {}).get("optimizer_choice")
            self.choice = (OptimizerChoice.from_dict(saved_choice) if saved_choice else
                           choose_optimizer(cfg, iterations=iterations, explicit=self.plan.explicit))
            self.optimizer = build_optimizer(groups, cfg, iterations=iterations, choice=self.choice)
            self.scaler = LeanGradScaler("cuda", enabled=cfg.amp and self.device.type == "cuda")
            self.ema = ModelEMA(model.net)
        self.start_epoch = 0
        # -inf: a task's fitness may be negative (an error to minimise: fitness = -error)
        self.best: dict[str, Any] = {"fitness": float("-inf"), "epoch": -1, "fields": task.empty_best()}
        self.best_snapshot: tuple[int, dict[str, torch.Tensor], float] | None = None  # save=False: (epoch, EMA, loss)
        with self._setup_phase("run folder"):
            self.run_dir, self.lock = claim_training_folder(cfg, self.resume)
            self.weights_dir = self.run_dir / "weights"
            if self.rank0:  # rank 0 owns the run folder: temp files there are an interrupted write's
                remove_stale_temps(self.weights_dir, owned_folder=True)
                remove_stale_temps(self.run_dir, owned_folder=True)
            self.results = ResultsLog.read(self.run_dir / "results.csv") if self.resume else ResultsLog(
                self.run_dir / "results.csv")
        with self._setup_phase("resume"):
            if (ckpt := self.resume) is not None:
                self._restore(ckpt)
                if libreyolo_ddp.resolve_on_rank_zero(lambda: restore_missing_best(self.weights_dir, ckpt)):
                    self.best = {"fitness": float("-inf"), "epoch": -1, "fields": task.empty_best()}
        set_autotune(cfg, self.device, steps=self.n_batches * max(cfg.epochs - self.start_epoch, 0))
        self.timer = StepTimer(cfg.profile and self.world == 1, self.device)
        if cfg.profile and self.world > 1:
            log.warning("profile=True is ignored under multi-GPU training (it synchronizes every phase)")
        with self._setup_phase("forward"):
            forward = self._training_forward()
        context = LossContext(epoch=self.start_epoch, epochs=cfg.epochs, close_mosaic=cfg.close_mosaic,
                              gains=self.plan.gains, world_size=self.world, global_batch=self.batch * self.world,
                              normalizer_sum=libreyolo_ddp.all_reduce_sum if self.world > 1 else None)
        self.loss_names = model.spec.task(model.task).loss_names
        half = half_weights.HalfWeights(model.net) if half_weights.applies(
            amp=cfg.amp, device=self.device, graphed=self.graphed, world=self.world,
            declared=model.spec.task(model.task).half_weights) else None
        self.step = TrainStep(model.family, forward, model.net, self.optimizer, self.scaler, self.ema, amp=cfg.amp,
                              device=self.device, context=context, max_grad_norm=cfg.max_grad_norm, timer=self.timer,
                              takes_targets=self.takes_targets, sync_gradients=self.sync_gradients, half_weights=half)
        self.divergence = DivergenceWatch(
            self.step.nonfinite, model.net, world=self.world, last=self.weights_dir / "last.pt",
            advice=f"the learning rate may be too high ({self.choice.name} lr0={self.choice.lr0:g}): train again with "
                   "a lower lr0, or check the dataset's labels")

    def _restore(self, ckpt: dict[str, Any]) -> None:
        self.model.net.load_state_dict(unpack_tensors(ckpt["train_model"]))
        if ckpt.get("ema") is not None:
            self.ema.load_state_dict(ckpt["ema"], int(ckpt.get("ema_updates", 0)))
        # Moments are laid out like their parameters as they load: a run saved in another memory
        # layout resumes in this one.
        self.optimizer.load_state_dict(unpack_tensors(ckpt["optimizer"]))
        if ckpt.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(ckpt["scaler"])
        self.start_epoch = int(ckpt["epoch"]) + 1
        fields = {k: float(ckpt.get(f"best_{k}", v)) for k, v in self.task.empty_best().items()}
        self.best = {"fitness": float(ckpt.get("best_fitness", float("-inf"))), "epoch": int(ckpt.get("best_epoch", -1)),
                     "fields": fields}
        log.info("resuming %s from epoch %d of %d", self.run_dir, self.start_epoch + 1, self.cfg.epochs)

    def _training_forward(self) -> nn.Module | Callable[..., Any]:
        """What the step calls: the family's training seam (graphed or eager), then its eager
        head if it has one. The DDP call site (SyncBatchNorm conversion, the DDP wrapper) and the
        CUDA-graph call site (``graph_forward``) are both here."""
        model, family = self.model, self.model.family
        self.forward_module = seam = model.training_module()
        self.takes_targets = has_training_head(family)
        self.sync_gradients = False
        model.graphs.attach_training(None)
        if self.world > 1:
            # Conversion swaps BatchNorm children in place, so model.net and the EMA (a plain-BN
            # copy with the same state-dict keys) stay valid.
            libreyolo_ddp.convert_sync_batchnorm(seam, enabled=self.plan.sync_bn, world_size=self.world,
                                                 per_rank_batch=self.batch)
        self.graphed = graphed = wants_graphs(model, self.cfg, device=self.device)
        if graphed or self.world == 1:
            # Graphed steps hand gradients back outside autograd's hooks, so under several ranks
            # they are averaged explicitly (one flat all-reduce per optimizer step), not by DDP.
            prefix = graph_forward(model, seam, self.cfg, world_size=self.world) if graphed else seam
            if self.world > 1:
                libreyolo_ddp.broadcast_parameters(model.net)
                self.sync_gradients = True
            return SeamThenHead(model.net, prefix, family) if self.takes_targets else prefix
        module: nn.Module = SeamThenHead(model.net, seam, family) if self.takes_targets else seam
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.forward_module = nn.parallel.DistributedDataParallel(module, device_ids=ids)
        return self.forward_module

    # ------------------------------------------------------------------ run
    def run(self) -> TrainOutcome:
        with restored_backend_flags():  # deterministic / cudnn settings are the run's, not the process's
            try:
                return self._run()
            finally:
                lock = getattr(self, "lock", None)
                if lock is not None:  # the folder is free for another run from here
                    lock.release()
                self.model.graphs.release_training()
                close = getattr(getattr(self, "train_data", None), "close", None)
                if close is not None:  # the rendering graphs' pool and resident images: free now
                    close()

    def _run(self) -> TrainOutcome:
        epoch, stopped_early, last, metrics = 0, False, None, {}
        try:
            self._setup()
            if self.rank0:
                with self._setup_phase("run folder"):
                    self._write_args()
                    if self.cfg.plots and not self.resume:
                        plot_start_of_training(self.train_index, self.model.names, self.run_dir)
                log.info("setup %.1f s: %s", sum(self.setup_s.values()),
                         ", ".join(f"{k} {v:.1f} s" for k, v in self.setup_s.items()))
                if not self.cfg.save:
                    log.info("save=False: no checkpoint is written; the trained weights live in this process only")
            self.callbacks.emit(TrainStart(self.run_dir, self.cfg.epochs, self.start_epoch, self.cfg.as_dict(),
                                           dict(self.setup_s)))
            for epoch in range(self.start_epoch, self.cfg.epochs):
                row, is_best, last = self._one_epoch(epoch)
                metrics = row
                self.callbacks.emit(EpochEnd(epoch, row, is_best, self.run_dir))
                if self._should_stop(epoch):
                    stopped_early = True
                    log.info("early stop: no improvement for %d epochs (best epoch %d)", self.cfg.patience,
                             self.best["epoch"] + 1)
                    break
        except BaseException as err:
            self.callbacks.emit(TrainException(getattr(self, "run_dir", None), epoch, f"{type(err).__name__}: {err}"))
            raise
        if self.rank0:
            forget_run(self.cfg.project)  # completed: a torchrun job id reused later starts afresh
        # Paths where rank 0 writes; other ranks read them only after a barrier (see entry.py).
        best_file = self.weights_dir / "best.pt"
        # no epoch validated (or none improved): name only files that exist
        best = None if not self.cfg.save or self.rank0 and not best_file.is_file() else best_file
        outcome = TrainOutcome(self.run_dir, best, self.weights_dir / "last.pt" if self.cfg.save else None, metrics,
                               epoch + 1 - self.start_epoch, stopped_early,
                               kept=None if self.cfg.save else self._kept_weights(epoch, metrics))
        if self.rank0 and self.cfg.plots:
            self.results.plot(self.run_dir / "results.png")
        graphed = self.model.graphs.training
        self.callbacks.emit(TrainEnd(self.run_dir, outcome.best, last, outcome.epochs_run, stopped_early, metrics,
                                     graphed.info() if graphed is not None else None))
        return outcome

    def _kept_weights(self, epoch: int, metrics: dict[str, float]) -> dict[str, Any]:
        """``save=False``: the checkpoint ``best.pt`` would hold, built once, in memory: the best
        epoch's EMA weights (the kept snapshot unless ``epoch``, the last run, was the best)."""
        best_epoch, loss = epoch, metrics.get("train/loss", 0.0)
        if self.best_snapshot is not None and self.best_snapshot[0] == self.best["epoch"] != epoch:
            best_epoch, state, loss = self.best_snapshot
            self.ema.ema.load_state_dict(state)
        elif self.best["epoch"] != epoch and self.rank0:  # no validation scored (NaN fitness, say)
            log.warning("save=False: the best epoch (%d) has no weights kept; the model holds the last epoch's (%d)",
                        self.best["epoch"] + 1, epoch + 1)
        self.best_snapshot = None
        # Ranks hold equal parameters but, without SyncBatchNorm, their own BatchNorm statistics: all
        # take rank 0's, as they would by loading its best.pt.
        libreyolo_ddp.broadcast_parameters(self.ema.ema)
        ckpt = build_training_checkpoint(
            self.model, net=self.model.net, ema=self.ema, optimizer=self.optimizer, scaler=self.scaler,
            epoch=best_epoch, best=self.best, config=self.cfg.as_dict(), world_size=self.world,
            global_batch=self.global_batch, run_dir=self.run_dir, loss=loss, imgsz=self.imgsz)
        return best_weights(ckpt)

    def _write_args(self) -> None:
        import yaml

        (self.run_dir / "args.yaml").write_text(yaml.safe_dump(self.cfg.as_dict(), sort_keys=False))

    def _should_stop(self, epoch: int) -> bool:
        # Every rank holds the same (broadcast) metrics, so every rank decides the same: no deadlock.
        return self.cfg.patience > 0 and epoch - self.best["epoch"] >= self.cfg.patience

    def _one_epoch(self, epoch: int) -> tuple[dict[str, float], bool, Path | None]:
        cfg = self.cfg
        mosaic = epoch < cfg.epochs - cfg.close_mosaic
        if epoch == cfg.epochs - cfg.close_mosaic and cfg.close_mosaic > 0:
            log.info("closing mosaic for the last %d epochs", cfg.close_mosaic)
        self.train_data.set_epoch(epoch, mosaic=mosaic)
        reason = self.model.family.epoch_start(epoch, cfg.epochs, cfg.close_mosaic)
        if reason:
            self.model.graphs.invalidate(reason)
        self.step.start_epoch(epoch)
        train_stats = self._train_epoch(epoch)
        self.divergence.check_state(epoch, {"weights": self.model.net, "EMA weights": self.ema.ema})
        row: dict[str, float] = {"epoch": epoch + 1, **train_stats}
        final = epoch == cfg.epochs - 1
        is_best = False
        if self.val_data is not None and (cfg.val or final):
            val_started = time.perf_counter()
            ema_net = self.ema.ema
            settings = EvalSettings(conf=cfg.val_conf, iou=cfg.val_iou, max_det=cfg.max_det,
                                    save_dir=self.run_dir if final else None, plots=cfg.plots and final,
                                    loss=validation_loss(self.model, ema_net, self.step.context),
                                    loss_names=self.loss_names)
            result = self.task.evaluate(self.model, lambda x: self.model.inference_forward(x, net=ema_net),
                                        self.val_data, settings=settings, progress=self.rank0 and cfg.verbose)
            row.update(result.as_dict())
            row["time/val_s"] = time.perf_counter() - val_started
            fit = result.fitness
            row["fitness"] = fit
            if fit > self.best["fitness"]:
                is_best = True
                self.best = {"fitness": fit, "epoch": epoch, "fields": result.best_fields()}
            summary = result.summary() + ("  (best)" if is_best else "")
        else:
            summary = f"loss {train_stats.get('train/loss', 0.0):.4f} (no validation)"
            if self.best["epoch"] < 0 or not cfg.val:
                is_best = True
                self.best.update(epoch=epoch)
        if self.rank0:
            log.info("epoch %d/%d: %s%s%s", epoch + 1, cfg.epochs, summary, self._skipped_note(), self.divergence.note())
        row.update({f"lr/pg{i}": g["lr"] for i, g in enumerate(self.optimizer.param_groups)})
        if self.val_data is not None and self.callbacks.wants("wants_prediction_images"):
            self.callbacks.emit(PredictionImages(epoch, self._prediction_images()))
        last = None
        if not cfg.save and is_best and cfg.val and not final:
            # No best.pt to come back to: keep the best epoch's EMA weights in memory, unless this
            # epoch's are the run's last anyway (every epoch counts as best without validation).
            self.best_snapshot = (epoch, cpu_state_dict(self.ema.ema), train_stats.get("train/loss", 0.0))
        if self.rank0 and cfg.save:
            save_started = time.perf_counter()
            ckpt = build_training_checkpoint(
                self.model, net=self.model.net, ema=self.ema, optimizer=self.optimizer, scaler=self.scaler,
                epoch=epoch, best=self.best, config=cfg.as_dict(), world_size=self.world,
                global_batch=self.global_batch, run_dir=self.run_dir, loss=train_stats.get("train/loss", 0.0),
                imgsz=self.imgsz)
            ckpt["optimizer_choice"] = self.choice.as_dict()  # a resume keeps it (auto decides by run length)
            last, _ = write_epoch_checkpoints(ckpt, self.weights_dir, is_best=is_best, epoch=epoch,
                                              save_period=cfg.save_period)
            row["time/save_s"] = time.perf_counter() - save_started
        if self.rank0:
            self.results.append(row)
        return row, is_best, last

    def _skipped_note(self) -> str:
        """``; 2 images skipped (unreadable, named above)`` when the data pipeline left any out."""
        n = len(self.skipped)
        return f"; {n} image{'s' if n != 1 else ''} skipped (unreadable, named above)" if n else ""

    def _train_epoch(self, epoch: int) -> dict[str, float]:
        cfg, step, nb = self.cfg, self.step, self.n_batches
        self.forward_module.train()
        self.timer.reset()
        warmup = warmup_iterations(cfg.warmup_epochs, nb, cfg.epochs)
        sums = torch.zeros(len(self.loss_names), device=self.device)
        last_opt = (epoch * nb) - 1
        wait_s, first_step_s, first_data_s, started = 0.0, 0.0, 0.0, time.perf_counter()
        bar = tqdm(total=nb, desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not (self.rank0 and cfg.verbose),
                   leave=False, dynamic_ncols=True)
        batches = iter(self.train_data)
        self.optimizer.zero_grad(set_to_none=True)
        for i in range(nb):
            t0 = time.perf_counter()
            with self.timer.phase("data"):
                batch = next(batches)
            wait_s += time.perf_counter() - t0
            if i == 0:
                first_data_s = wait_s  # worker start and the first batch (an image cache's first fill)
            ni = i + nb * epoch
            if self.rank0 and cfg.plots and epoch == self.start_epoch and i < 3 and not self.resume:
                plot_train_batch(batch, self.model.names, self.run_dir / f"train_batch{i}.jpg")
            accumulate = accumulate_steps(ni, warmup, cfg.nbs, self.global_batch, nb)
            apply_lr(self.optimizer, iteration=ni, warmup_iters=warmup, epoch=epoch, epochs=cfg.epochs, lrf=cfg.lrf,
                     cosine=cfg.cos_lr, warmup_bias_lr=cfg.warmup_bias_lr, warmup_momentum=cfg.warmup_momentum,
                     momentum=self.choice.momentum)
            images = self._multi_scale(batch.images) if cfg.multi_scale else batch.images
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            items = step.forward_backward(images, batch.targets)
            sums += items
            if self.callbacks.active and (ni + 1) % cfg.log_every == 0:
                self.callbacks.emit(StepEnd(epoch, ni, {f"train/{n}_loss": v for n, v in
                                                        zip(self.loss_names, items.tolist())},
                                            {f"lr/pg{j}": g["lr"] for j, g in enumerate(self.optimizer.param_groups)}))
            if ni - last_opt >= accumulate or i == nb - 1:
                step.optimizer_step()
                last_opt = ni
            if i % LOG_EVERY == 0 or i == nb - 1:  # every rank: they stop together or not at all
                self.divergence.watch(epoch, i)
            if self.rank0 and cfg.verbose and (i % LOG_EVERY == 0 or i == nb - 1):
                with self.timer.phase("log"):
                    mean = (sums / (i + 1)).tolist()  # the loop's only read-back of a device value
                    elapsed = time.perf_counter() - started
                    losses = " ".join(f"{n} {v:.3f}" for n, v in zip(self.loss_names, mean))
                    bar.set_postfix_str(f"{losses} | {(i + 1) * self.global_batch / elapsed:.0f} img/s, "
                                        f"data {wait_s / elapsed:.0%}")
            self.timer.steps += 1
            if i == 0:  # one sync an epoch, so the figure is the step's end and not its launch
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                first_step_s = time.perf_counter() - started
            bar.update(1)
        bar.close()
        elapsed = time.perf_counter() - started
        # The mean over ranks: every rank's own items estimate the global loss, their mean is it.
        mean = libreyolo_ddp.all_reduce_mean(sums / nb).tolist()
        stats = {f"train/{name}_loss": value for name, value in zip(self.loss_names, mean)}
        stats.update(global_throughput(images=nb * self.batch, wait_s=wait_s, elapsed_s=elapsed))
        stats["train/loss"] = sum(mean)
        stats["train/first_step_s"] = first_step_s
        stats["train/first_data_s"] = first_data_s
        if self.timer.enabled:
            stats.update({f"profile/{k}_s": v for k, v in self.timer.totals.items()})
            stats["profile/steps"] = float(self.timer.steps)
        return stats

    def _prediction_images(self) -> dict[str, Any]:
        """The EMA model's predictions on the first few validation images (for loggers)."""
        if self._logged_images is None:
            self._logged_images = first_images(self.val_data)
        return prediction_images(self.model, self.ema.ema, *self._logged_images)

    def _multi_scale(self, images: torch.Tensor) -> torch.Tensor:
        """A random size in [0.5, 1.5] x imgsz (multiple of the stride) per batch; graphs never capture these."""
        s = self.model.stride
        lo, hi = max(s, int(self.imgsz * 0.5) // s * s), int(self.imgsz * 1.5) // s * s
        size = int(torch.randint(lo // s, hi // s + 1, ()).item()) * s
        if size == images.shape[-1]:
            return images
        return F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)


def global_throughput(*, images: int, wait_s: float, elapsed_s: float) -> dict[str, float]:
    """This rank's epoch timing -> the run's: images over all ranks per second of the slowest rank,
    the mean share of time ranks waited for data, and the slowest rank's epoch time.

    Every rank calls this (two all-reduces), so rank 0's row in ``results.csv`` is global.
    """
    local = torch.tensor([float(images), wait_s / max(elapsed_s, 1e-9)], dtype=torch.float64)
    total_images, wait_share = libreyolo_ddp.all_reduce_mean(local).tolist()
    slowest = float(libreyolo_ddp.all_reduce_max(torch.tensor([elapsed_s], dtype=torch.float64)).item())
    world = libreyolo_ddp.dist_env().world_size if libreyolo_ddp.is_dist_initialized() else 1
    return {"train/images_per_s": total_images * world / max(slowest, 1e-9),
            "train/data_wait_share": wait_share, "train/epoch_s": slowest}
