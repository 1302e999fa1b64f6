"""One model object trains once at a time, and nothing else runs on it while it trains."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from libreyolo_models import LibreYOLO
from libreyolo_models.errors import ModelBusyError
from libreyolo_models.train.callbacks import TrainStart


class HoldAtStart:
    """A callback that keeps the training thread at its start until the test lets it go."""

    def __init__(self) -> None:
        self.started, self.go = threading.Event(), threading.Event()

    def __call__(self, event: object) -> None:
        if isinstance(event, TrainStart):
            self.started.set()
            self.go.wait(timeout=60)


def test_a_second_train_and_a_predict_during_training_are_refused_with_one_line(tmp_path: Path) -> None:
    from libreyolo_models.data.shapes import generate_shapes

    generate_shapes(tmp_path / "data", split_sizes={"train": 4, "val": 2})
    model = LibreYOLO("LibreYOLO9t.yaml")
    hold = HoldAtStart()
    outcome: list[object] = []
    options = {"data": str(tmp_path / "data" / "data.yaml"), "project": str(tmp_path / "runs"), "imgsz": 64,
               "batch": 2, "workers": 0, "epochs": 1, "plots": False, "verbose": False, "val": False}
    worker = threading.Thread(target=lambda: outcome.append(model.train(callbacks=[hold], **options)),
                              name="trainer-thread")
    worker.start()
    try:
        assert hold.started.wait(timeout=120)
        image = np.zeros((64, 64, 3), np.uint8)
        with pytest.raises(ModelBusyError, match=r"cannot predict while this model trains \(train\(\) in thread "
                                                 r"'trainer-thread'\)") as err:
            model.predict(image)
        assert "\n" not in str(err.value) and "last.pt" in str(err.value)
        with pytest.raises(ModelBusyError, match="this model is already training"):
            model.train(**options)
        for action, call in (("val", lambda: model.val(data=options["data"])),
                             ("export", lambda: model.export(format="onnx")),
                             ("benchmark", lambda: model.benchmark(data=options["data"])),
                             ("track", lambda: model.track(image))):
            with pytest.raises(ModelBusyError, match=f"cannot {action} while this model trains"):
                call()
    finally:
        hold.go.set()
        worker.join(timeout=120)
    assert outcome and not worker.is_alive()
    assert len(model.predict(np.zeros((64, 64, 3), np.uint8))) == 1  # free again once train() returned
