"""Worker functions for the two-process Gloo tests (module level: spawn pickles them by name)."""

from __future__ import annotations


def validate_shard(weights: str, data: str, imgsz: int, split: str = "val") -> dict:
    """Each rank validates its shard; rank 0's merged metrics come back."""
    from libreyolo_models import LibreYOLO

    model = LibreYOLO(weights)
    result = model.val(data=data, split=split, imgsz=imgsz, batch=2, workers=0, conf=0.001, verbose=False)
    return {**result.as_dict(), "n_images": result.n_images}


def train_two_ranks(weights: str, data: str, project: str, device: str = "cpu") -> dict:
    """One rank of a two-rank training run (one epoch, no mosaic, so boxes cannot travel between images)."""
    from libreyolo_models import LibreYOLO
    from libreyolo_models.train.plan import resolve_plan
    from libreyolo_models.train.trainer import Trainer

    model = LibreYOLO(weights).handle
    options = {"data": data, "epochs": 1, "imgsz": 64, "batch": 8, "workers": 0, "device": device, "mosaic": 0.0,
               "project": project, "name": "exp", "verbose": False, "plots": False}
    outcome = Trainer(model, resolve_plan(model, options, "test")).run()
    return {"run_dir": str(outcome.run_dir), "best": str(outcome.best)}


def train_two_ranks_cuda(weights: str, data: str, project: str) -> dict:
    return train_two_ranks(weights, data, project, device="0,1")


def save_grid_model(path: str) -> str:
    """A YOLOv9-t whose head ignores the image: every anchor predicts a 2-cell box and class
    scores 2 > 1 > 0 > -1 > -2. Some of those boxes overlap real objects, so validation finds true
    positives (mAP above zero) without minutes of training; the result is the same for any input
    order, which is what the sharded-validation tests compare."""
    import torch

    from libreyolo_models import LibreYOLO9

    model = LibreYOLO9(size="t", nc=5, names=["circle", "square", "triangle", "star", "cross"])
    with torch.no_grad():
        for box in model.net.head.cv2:
            bias = torch.zeros(4, 16)
            bias[:, 1] = 10.0  # each side one cell from the anchor
            box[-1].weight.zero_()
            box[-1].bias.copy_(bias.flatten())
        for cls in model.net.head.cv3:
            cls[-1].weight.zero_()
            cls[-1].bias.copy_(torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0]))
    return str(model.save(path))


def train_two_ranks_explicit_sync(weights: str, data: str, project: str, explicit: bool) -> dict:
    """One epoch on two ranks, either through the DDP wrapper or the way graphed DDP runs: no
    wrapper, ranks voting on graph decisions, gradients averaged in one all-reduce per step. The
    graph itself is replaced by the plain module (capture needs CUDA), so what is compared is the
    wiring: parameters broadcast, SyncBatchNorm, gradient averaging, loss normalisation."""
    import libreyolo_models.train.trainer as trainer_module
    from libreyolo_models import LibreYOLO
    from libreyolo_models.train.plan import resolve_plan
    from libreyolo_models.train.trainer import Trainer

    if explicit:
        trainer_module.wants_graphs = lambda *args, **kwargs: True  # type: ignore[assignment]
        trainer_module.graph_forward = lambda model, module, cfg, world_size: module  # type: ignore[assignment]
    model = LibreYOLO(weights).handle
    options = {"data": data, "epochs": 1, "imgsz": 64, "batch": 8, "workers": 0, "device": "cpu", "mosaic": 0.0,
               "project": project, "name": "explicit" if explicit else "wrapper", "verbose": False, "plots": False,
               "deterministic": True, "sync_bn": True, "val": False}
    trainer = Trainer(model, resolve_plan(model, options, "test"))
    outcome = trainer.run()
    return {"metrics": outcome.metrics, "state": {k: v.clone() for k, v in trainer.model.net.state_dict().items()}}


def train_two_ranks_both_syncs(weights: str, data: str, project: str) -> dict:
    """``train_two_ranks_explicit_sync`` through the wrapper, then explicitly, in the same two rank
    processes (one spawn instead of two: each start costs a torch import per rank)."""
    import libreyolo_models.train.trainer as trainer_module

    saved = trainer_module.wants_graphs, trainer_module.graph_forward
    try:
        return {explicit: train_two_ranks_explicit_sync(weights, data, project, explicit) for explicit in (False, True)}
    finally:
        trainer_module.wants_graphs, trainer_module.graph_forward = saved


def train_two_gpus_graph_arm(weights: str, data: str, project: str, graph: bool, fail_rank: int = -1) -> dict:
    """One arm of the graphs-under-DDP comparison on two GPUs (20 steps, SyncBatchNorm on, the
    deterministic cuDNN choice). ``fail_rank``: that rank's graph captures raise, to check that
    every rank falls back together. Rank 0 returns the losses, its weights, every rank's weights
    and every rank's training-graph info."""
    import torch

    import libreyolo_ddp
    import libreyolo_models.graphs as graphs_module
    from libreyolo_models import LibreYOLO
    from libreyolo_models.train.plan import resolve_plan
    from libreyolo_models.train.trainer import Trainer

    rank = libreyolo_ddp.dist_env().rank
    if rank == fail_rank:
        # Fail where real capture failures happen: after the eager warmup steps (whose
        # SyncBatchNorm collectives every rank runs), when the graph itself is being recorded.
        def refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise RuntimeError(f"capture refused on rank {rank} (injected)")
        torch.cuda.graph = refuse  # type: ignore[assignment, misc]
    seen: list[object] = []
    release = graphs_module.ModelGraphs.release_training

    def keep_info(self):  # noqa: ANN001, ANN202 - records the graph state before it is freed
        if self.training is not None:
            seen.append(self.training.info())
        release(self)

    graphs_module.ModelGraphs.release_training = keep_info  # type: ignore[method-assign]
    model = LibreYOLO(weights).handle
    options = {"data": data, "epochs": 2, "imgsz": 128, "batch": 16, "workers": 2, "device": "0,1", "mosaic": 0.0,
               "project": project, "name": "graph" if graph else "eager", "verbose": False, "plots": False,
               "deterministic": True, "sync_bn": True, "val": False, "cuda_graph": graph}
    trainer = Trainer(model, resolve_plan(model, options, "test"))
    outcome = trainer.run()
    state = {k: v.detach().cpu().clone() for k, v in trainer.model.net.state_dict().items()}
    ranks = libreyolo_ddp.gather_to_rank_zero(state)
    infos = libreyolo_ddp.gather_to_rank_zero([str(i) for i in seen])
    if rank != 0:
        return {}
    assert ranks is not None and infos is not None
    same_across_ranks = all(torch.equal(ranks[0][k], ranks[1][k]) for k in state)
    return {"metrics": outcome.metrics, "state": state, "same_across_ranks": same_across_ranks, "infos": infos}
