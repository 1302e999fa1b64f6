"""The training coordinator: epochs over small collaborators, one process's view of one rank.

DDP is plugged in at one place (``_wrap_for_training``: SyncBN + the DDP wrapper) and CUDA graphs
at another (``graph_forward``); everything else is the same single-device code path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import libreyolo_ddp

from ..data.datasets import load_split, resolve_dataset
from ..data.pipeline import TrainPipeline, ValPipeline
from ..rundir import next_run_dir
from ..settings import check_imgsz
from ..val.validator import evaluate
from ..workers import default_workers
from .adapt import adapt_to_classes
from .callbacks import CallbackRunner, EpochEnd, TrainEnd, TrainException, TrainStart
from .checkpoints import build_training_checkpoint, write_epoch_checkpoints
from .ema import ModelEMA
from .graph_forward import graph_forward
from .optim import align_state_layout, build_optimizer
from .results_log import ResultsLog
from .schedule import accumulate_steps, apply_lr, warmup_iterations
from .settings import TrainConfig
from .step import StepTimer, TrainStep

if TYPE_CHECKING:
    from ..model import LibreYOLO

log = logging.getLogger(__name__)


def fitness(map50: float, map50_95: float) -> float:
    """What "best" means: mostly mAP50-95, a little mAP50 (ties broken toward easier detections)."""
    return 0.1 * map50 + 0.9 * map50_95


@dataclass
class TrainOutcome:
    """What ``model.train`` returns."""

    run_dir: Path
    best: Path | None             # weights/best.pt (EMA weights of the best epoch)
    last: Path | None             # weights/last.pt (everything needed to resume)
    metrics: dict[str, float] = field(default_factory=dict)
    epochs_run: int = 0
    stopped_early: bool = False

    def summary(self) -> str:
        keys = ("metrics/mAP50", "metrics/mAP50-95", "metrics/precision", "metrics/recall")
        shown = ", ".join(f"{k.split('/')[-1]}={self.metrics[k]:.4f}" for k in keys if k in self.metrics)
        return f"trained {self.epochs_run} epochs -> {self.run_dir}; best {self.best}; {shown}"


class Trainer:
    """Trains ``model`` in this process as this rank (a single device, or one rank of DDP)."""

    def __init__(self, model: LibreYOLO, cfg: TrainConfig, *, callbacks: list | None = None,
                 resume: dict[str, Any] | None = None) -> None:
        self.model, self.cfg, self.resume = model, cfg, resume
        self.env = libreyolo_ddp.dist_env()
        self.rank0 = self.env.rank == 0
        self.world = self.env.world_size
        self.callbacks = CallbackRunner(callbacks, enabled=self.rank0)

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        cfg, model = self.cfg, self.model
        self.device = (libreyolo_ddp.local_device() if self.world > 1
                       else libreyolo_ddp.parse_devices(cfg.device or "auto").torch_device(0))
        libreyolo_ddp.seed_everything(cfg.seed)
        cuda = self.device.type == "cuda"
        if cfg.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        elif cuda and (cfg.cudnn_benchmark is True
                       or (cfg.cudnn_benchmark == "auto" and not cfg.multi_scale)):
            torch.backends.cudnn.benchmark = True  # fixed shapes: autotune each conv once, then reuse
        data = libreyolo_ddp.resolve_on_rank_zero(lambda: resolve_dataset(cfg.data))
        adapt_to_classes(model, data.nc, data.names)
        self.imgsz = check_imgsz(cfg.imgsz or model.imgsz)
        model.imgsz = self.imgsz
        self.global_batch = cfg.batch
        self.batch = libreyolo_ddp.split_global_batch(cfg.batch, self.world)
        train_index = load_split(data, "train")
        val_index = load_split(data, "val") if data.val else None
        model.net.to(self.device).float()
        self.channels_last = cuda and cfg.channels_last in (True, "auto")
        if self.channels_last:  # before the EMA copy and the optimizer, so both see NHWC parameters
            model.net.to(memory_format=torch.channels_last)
        model.task = "detect"
        workers = default_workers(cfg.workers, batch=self.batch, world_size=self.world)
        self.train_data = TrainPipeline(train_index, imgsz=self.imgsz, batch_size=self.batch, device=self.device,
                                        augment=cfg.augment(), workers=workers, seed=cfg.seed, gpu_augment=cfg.gpu_augment,
                                        cache=cfg.cache)
        self.val_data = (ValPipeline(val_index, imgsz=self.imgsz, batch_size=self.batch * 2, device=self.device,
                                     workers=workers, cache=cfg.cache) if val_index is not None else None)
        self.n_batches = len(self.train_data)
        self.accumulate = max(round(cfg.nbs / self.global_batch), 1)
        weight_decay = cfg.weight_decay * self.global_batch * self.accumulate / cfg.nbs
        iterations = math.ceil(self.n_batches / self.accumulate) * cfg.epochs
        self.optimizer = build_optimizer(model.net, cfg, iterations=iterations, weight_decay=weight_decay)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp and self.device.type == "cuda")
        self.ema = ModelEMA(model.net)
        self.start_epoch, self.best = 0, {"fitness": -1.0, "epoch": -1}
        self.run_dir = self._resolve_run_dir()
        self.weights_dir = self.run_dir / "weights"
        self.results = ResultsLog.read(self.run_dir / "results.csv") if self.resume else ResultsLog(
            self.run_dir / "results.csv")
        if self.resume:
            self._restore(self.resume)
        self.forward_module = self._wrap_for_training()
        self.timer = StepTimer(cfg.profile and self.world == 1, self.device)
        if cfg.profile and self.world > 1:
            log.warning("profile=True is ignored under multi-GPU training (it synchronizes every phase)")
        forward = graph_forward(model, self.forward_module, cfg, device=self.device, world_size=self.world)
        self.step = TrainStep(model, forward, model.net, self.optimizer, self.scaler, self.ema, amp=cfg.amp,
                              device=self.device, world_size=self.world, global_batch=self.batch * self.world,
                              normalizer_sum=libreyolo_ddp.all_reduce_sum if self.world > 1 else None,
                              max_grad_norm=cfg.max_grad_norm, timer=self.timer)

    def _resolve_run_dir(self) -> Path:
        if self.resume:
            return Path(self.resume["run_dir"])
        cfg = self.cfg
        return libreyolo_ddp.resolve_on_rank_zero(lambda: next_run_dir(cfg.project, cfg.name, exist_ok=cfg.exist_ok))

    def _restore(self, ckpt: dict[str, Any]) -> None:
        self.model.net.load_state_dict(ckpt["train_model"])
        if ckpt.get("ema") is not None:
            self.ema.load_state_dict(ckpt["ema"], int(ckpt.get("ema_updates", 0)))
        self.optimizer.load_state_dict(ckpt["optimizer"])
        align_state_layout(self.optimizer)  # a run saved in another memory layout resumes in this one
        if ckpt.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(ckpt["scaler"])
        self.start_epoch = int(ckpt["epoch"]) + 1
        self.best = {"fitness": float(ckpt.get("best_fitness", -1.0)), "epoch": int(ckpt.get("best_epoch", -1)),
                     "map50": float(ckpt.get("best_mAP50", 0.0)), "map50_95": float(ckpt.get("best_mAP50_95", 0.0))}
        log.info("resuming %s from epoch %d of %d", self.run_dir, self.start_epoch + 1, self.cfg.epochs)

    def _wrap_for_training(self) -> nn.Module:
        """The DDP call site: SyncBatchNorm conversion, then the DDP wrapper (distributed only)."""
        module = self.model.training_module()
        if self.world == 1:
            return module
        sync_bn = self.model.spec.sync_bn_default if self.cfg.sync_bn is None else self.cfg.sync_bn
        module = libreyolo_ddp.convert_sync_batchnorm(module, enabled=sync_bn, world_size=self.world,
                                                      per_rank_batch=self.batch)
        # Conversion swaps BatchNorm children in place, so model.net and the EMA (a plain-BN copy
        # with the same state-dict keys) stay valid.
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(module, device_ids=ids)

    # ------------------------------------------------------------------ run
    def run(self) -> TrainOutcome:
        with _restored_backend_flags():  # deterministic / cudnn settings are the run's, not the process's
            return self._run()

    def _run(self) -> TrainOutcome:
        epoch, stopped_early, last, metrics = 0, False, None, {}
        try:
            self._setup()
            if self.rank0:
                self._write_args()
            self.callbacks.emit(TrainStart(self.run_dir, self.cfg.epochs, self.start_epoch, self.cfg.as_dict()))
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
        # Paths where rank 0 writes; other ranks read them only after a barrier (see entry.py).
        outcome = TrainOutcome(self.run_dir, self.weights_dir / "best.pt", self.weights_dir / "last.pt", metrics,
                               epoch + 1 - self.start_epoch, stopped_early)
        if self.rank0 and self.cfg.plots:
            self.results.plot(self.run_dir / "results.png")
        self.callbacks.emit(TrainEnd(self.run_dir, outcome.best, last, outcome.epochs_run, stopped_early, metrics))
        return outcome

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
        train_stats = self._train_epoch(epoch)
        row: dict[str, float] = {"epoch": epoch + 1, **train_stats}
        final = epoch == cfg.epochs - 1
        is_best = False
        if self.val_data is not None and (cfg.val or final):
            ema_net = self.ema.ema
            result = evaluate(self.model, lambda x: self.model.forward_tensors(x, net=ema_net), self.val_data,
                              conf=cfg.val_conf, iou=cfg.val_iou, max_det=cfg.max_det,
                              progress=self.rank0 and cfg.verbose)
            row.update(result.as_dict())
            fit = fitness(result.map50, result.map50_95)
            row["fitness"] = fit
            if fit > self.best["fitness"]:
                is_best = True
                self.best = {"fitness": fit, "epoch": epoch, "map50": result.map50, "map50_95": result.map50_95}
            if self.rank0:
                log.info("epoch %d/%d: mAP50 %.4f  mAP50-95 %.4f  P %.4f  R %.4f%s", epoch + 1, cfg.epochs,
                         result.map50, result.map50_95, result.precision, result.recall, "  (best)" if is_best else "")
        elif self.best["epoch"] < 0 or not cfg.val:
            is_best = True
            self.best.update(epoch=epoch)
        row.update({f"lr/pg{i}": g["lr"] for i, g in enumerate(self.optimizer.param_groups)})
        last = None
        if self.rank0:
            ckpt = build_training_checkpoint(
                self.model, net=self.model.net, ema=self.ema, optimizer=self.optimizer, scaler=self.scaler,
                epoch=epoch, best=self.best, config=cfg.as_dict(), world_size=self.world,
                global_batch=self.global_batch, run_dir=self.run_dir, loss=train_stats.get("train/loss", 0.0))
            last, _ = write_epoch_checkpoints(ckpt, self.weights_dir, is_best=is_best, epoch=epoch,
                                              save_period=cfg.save_period)
            self.results.append(row)
        return row, is_best, last

    def _train_epoch(self, epoch: int) -> dict[str, float]:
        cfg, step, nb = self.cfg, self.step, self.n_batches
        self.forward_module.train()
        self.timer.reset()
        warmup = warmup_iterations(cfg.warmup_epochs, nb)
        sums = torch.zeros(3, device=self.device)
        last_opt = (epoch * nb) - 1
        wait_s, started = 0.0, time.perf_counter()
        bar = tqdm(total=nb, desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not (self.rank0 and cfg.verbose),
                   leave=False, dynamic_ncols=True)
        batches = iter(self.train_data)
        self.optimizer.zero_grad(set_to_none=True)
        for i in range(nb):
            t0 = time.perf_counter()
            with self.timer.phase("data"):
                batch = next(batches)
            wait_s += time.perf_counter() - t0
            ni = i + nb * epoch
            accumulate = accumulate_steps(ni, warmup, cfg.nbs, self.global_batch)
            apply_lr(self.optimizer, iteration=ni, warmup_iters=warmup, epoch=epoch, epochs=cfg.epochs, lrf=cfg.lrf,
                     cosine=cfg.cos_lr, warmup_bias_lr=cfg.warmup_bias_lr, warmup_momentum=cfg.warmup_momentum,
                     momentum=cfg.momentum)
            images = self._multi_scale(batch.images) if cfg.multi_scale else batch.images
            if self.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            sums += step.forward_backward(images, batch.targets)
            if ni - last_opt >= accumulate or i == nb - 1:
                step.optimizer_step()
                last_opt = ni
            if self.rank0 and cfg.verbose and (i % 10 == 0 or i == nb - 1):
                mean = (sums / (i + 1)).tolist()
                elapsed = time.perf_counter() - started
                bar.set_postfix_str(f"box {mean[0]:.3f} cls {mean[1]:.3f} dfl {mean[2]:.3f} | "
                                    f"{(i + 1) * self.global_batch / elapsed:.0f} img/s, data {wait_s / elapsed:.0%}")
            bar.update(1)
        bar.close()
        elapsed = time.perf_counter() - started
        mean = (sums / nb).tolist()
        stats = {"train/box_loss": mean[0], "train/cls_loss": mean[1], "train/dfl_loss": mean[2],
                 "train/loss": sum(mean), "train/images_per_s": nb * self.global_batch / elapsed,
                 "train/data_wait_share": wait_s / elapsed, "train/epoch_s": elapsed}
        if self.timer.enabled:
            stats.update({f"profile/{k}_s": v for k, v in self.timer.totals.items()})
        return stats

    def _multi_scale(self, images: torch.Tensor) -> torch.Tensor:
        """A random size in [0.5, 1.5] x imgsz (multiple of 32) per batch; graphs never capture these."""
        lo, hi = max(32, int(self.imgsz * 0.5) // 32 * 32), int(self.imgsz * 1.5) // 32 * 32
        size = int(torch.randint(lo // 32, hi // 32 + 1, ()).item()) * 32
        if size == images.shape[-1]:
            return images
        return F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)


@contextlib.contextmanager
def _restored_backend_flags() -> Iterator[None]:
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]
