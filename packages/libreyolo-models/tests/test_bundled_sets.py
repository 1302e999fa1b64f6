"""``data=`` naming another task's bundled set is one line naming that task and this model's set;
the table of bundled sets agrees with the names each task's reader accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from libreyolo_models.data import data_config
from libreyolo_models.data.errors import DataConfigError
from libreyolo_models.tasks import TASKS
from libreyolo_models.tasks.bundled_sets import BUNDLED_SETS, WHAT_IT_HOLDS, bundled_owner
from libreyolo_models.tasks.classify import folder_config
from libreyolo_models.tasks.depth import shapes_depth
from libreyolo_models.tasks.matte import shapes_matte
from libreyolo_models.tasks.ocr import shapes_ocr
from libreyolo_models.tasks.point import shapes_point
from libreyolo_models.tasks.restore import shapes_restore
from libreyolo_models.tasks.semantic import shapes_seg


def test_the_table_names_every_tasks_own_set() -> None:
    own = {"detect": data_config.BUNDLED_NAMES, "classify": folder_config.BUNDLED_NAMES,
           "semantic": shapes_seg.BUNDLED_NAMES, "segment": TASKS["segment"].bundled_names,  # type: ignore[attr-defined]
           "pose": TASKS["pose"].bundled_names, "point": shapes_point.BUNDLED_NAMES,  # type: ignore[attr-defined]
           "restore": shapes_restore.BUNDLED_NAMES, "matte": shapes_matte.BUNDLED_NAMES,
           "ocr": shapes_ocr.BUNDLED_NAMES, "depth": shapes_depth.BUNDLED_NAMES}
    assert {name: task for task, names in own.items() for name in names[:1]} == BUNDLED_SETS
    assert set(WHAT_IT_HOLDS) == set(BUNDLED_SETS.values()) and set(BUNDLED_SETS.values()) <= set(TASKS)


@pytest.mark.parametrize(("task", "data", "message"), [
    ("matte", "shapes", r"data='shapes' is the bundled detect set \(boxes\); a matte model cannot use it: "
                        r"use data='shapes-matte' or a matte dataset"),
    ("detect", "shapes-seg.yaml", r"bundled semantic set \(class masks\); a detect model .* data='shapes'"),
    ("restore", "shapes-matte", r"bundled matte set .*use data='shapes-restore'"),
    ("classify", "shapes", r"a classify model cannot use it: use data='shapes-cls'"),
    ("pose", "shapes-inst", r"bundled segment set \(boxes with instance masks\); a pose model .*'shapes-pose'"),
    ("prompt-segment", "shapes", r"prompt-segment validation \(it scores instance masks\) cannot use it: "
                                 r"use data='shapes-inst'"),
    ("point", "shapes-cls", r"a point model cannot use it: use data='shapes-point'"),
    ("ocr", "shapes-depth", r"an ocr model cannot use it: use data='shapes-ocr' or an ocr dataset"),
])
def test_another_tasks_set_is_named_with_this_models_set(task: str, data: str, message: str) -> None:
    with pytest.raises(DataConfigError, match=message) as err:
        TASKS[task].load_data(data)
    assert "\n" not in str(err.value)


def test_a_folder_of_that_name_and_accepted_sets_are_not_refused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert bundled_owner("shapes-cls") == "classify" and bundled_owner(42) is None
    (tmp_path / "shapes-cls").mkdir()  # the user's own folder wins over the name
    assert bundled_owner("shapes-cls") is None
    from libreyolo_models.tasks.bundled_sets import refuse_foreign_bundle

    refuse_foreign_bundle("shapes", "point", accepts=("detect",))  # box centres are points
    refuse_foreign_bundle("shapes-inst", "prompt-segment", accepts=("segment",))
