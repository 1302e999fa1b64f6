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
    from libreyolo_models.train.trainer import Trainer
    from libreyolo_models.train.settings import TrainConfig

    model = LibreYOLO(weights)
    cfg = TrainConfig(data=data, epochs=1, imgsz=64, batch=8, workers=0, device=device, mosaic=0.0, project=project,
                      name="exp", verbose=False, plots=False)
    outcome = Trainer(model, cfg).run()
    return {"run_dir": str(outcome.run_dir), "best": str(outcome.best)}


def train_two_ranks_cuda(weights: str, data: str, project: str) -> dict:
    return train_two_ranks(weights, data, project, device="0,1")
