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

    model = LibreYOLO(weights)
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
