"""OCR validation: PaddleOCR label files and their errors, the bundled ``shapes-ocr``, detection and
end-to-end scoring worked by hand, and ``val`` / ``libreyolo val`` on PP-OCR (random weights
everywhere; RapidOCR's converted weights, where their files are here, reading the set well)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from libreyolo_models import LibreYOLO
from libreyolo_models.data.errors import DataConfigError, EmptySplitError
from libreyolo_models.tasks import get_task
from libreyolo_models.tasks.ocr.labels import TextBox, load_ocr_data, parse_label_line, read_ocr_split
from libreyolo_models.tasks.ocr.metrics import polygon_iou, score_picture, total
from libreyolo_models.tasks.ocr.shapes_ocr import WORDS, generate_shapes_ocr

pytest.importorskip("cv2")  # the DB post-processing and the polygon overlaps are OpenCV's (extra 'opencv')


def square(x: float, y: float, side: float) -> np.ndarray:
    return np.array([[x, y], [x + side, y], [x + side, y + side], [x, y + side]], dtype=np.float32)


@pytest.fixture(scope="module")
def text_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shapes-ocr")
    generate_shapes_ocr(root, split_sizes={"train": 2, "val": 6})
    return root / "data.yaml"


def test_label_lines_parse_and_bad_ones_say_why() -> None:
    name, boxes = parse_label_line('img/a.jpg\t[{"transcription": "Hi", "points": [[1, 2], [9, 2], [9, 6], [1, 6]]},'
                                   ' {"transcription": "###", "points": [[0, 0], [3, 0], [3, 3]]}]')
    assert name == "img/a.jpg" and [b.text for b in boxes] == ["Hi", "###"] and [b.ignore for b in boxes] == [0, 1]
    assert boxes[0].points.shape == (4, 2) and boxes[0].points.dtype == np.float32
    for line, why in [("img/a.jpg [] ", "a tab"), ("a.jpg\t[{", "not JSON"), ("a.jpg\t{}", "JSON list"),
                      ('a.jpg\t[{"points": [[1, 2], [3, 4], [5, 6]]}]', "both"),
                      ('a.jpg\t[{"transcription": "x", "points": [[1, 2]]}]', "three or more")]:
        with pytest.raises(ValueError, match=why):
            parse_label_line(line)


def test_a_split_skips_what_it_cannot_use_and_names_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    Image.new("RGB", (20, 10)).save(tmp_path / "a.png")
    (tmp_path / "val.txt").write_text('a.png\t[]\nmissing.png\t[]\nbroken line\n\n', encoding="utf-8")
    (tmp_path / "data.yaml").write_text("val: val.txt\n", encoding="utf-8")
    data = load_ocr_data(str(tmp_path / "data.yaml"))
    assert data.root == tmp_path and data.nc == 1
    with caplog.at_level(logging.WARNING):
        split = read_ocr_split(data, "val")
    assert split.images == [tmp_path / "a.png"] and split.lines == [[]]
    assert "no such file" in caplog.text and "line 3: expected a picture path, a tab" in caplog.text
    (tmp_path / "val.txt").write_text("broken\n", encoding="utf-8")
    with pytest.raises(EmptySplitError, match=r"no usable picture in .*val.txt.*all 1 were skipped"):
        read_ocr_split(data, "val")
    with pytest.raises(DataConfigError, match=r"no 'train' split"):
        read_ocr_split(data, "train")
    with pytest.raises(DataConfigError, match=r"no split \(train, val or test\)"):
        load_ocr_data({"path": str(tmp_path)})
    with pytest.raises(DataConfigError, match=r"(?s)no such file; pass a data.yaml .*or the bundled .shapes-ocr."):
        load_ocr_data(str(tmp_path / "nothing.yaml"))


def test_icdar_2015_folders_read_as_downloaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    images, truth = tmp_path / "ch4_test_images", tmp_path / "Challenge4_Test_Task1_GT"
    images.mkdir()
    truth.mkdir()
    for name in ("img_1", "img_2", "img_3"):
        Image.new("RGB", (40, 30)).save(images / f"{name}.jpg")
    (truth / "gt_img_1.txt").write_text("\ufeff377,117,463,117,465,130,378,130,Genaxis Theatre\r\n"
                                       "374,155,409,155,409,170,374,170,###\r\n1,2,3,4,5,6,7,8,a,b\r\n",
                                       encoding="utf-8")
    (truth / "img_2.txt").write_text("1,2,3,x,5,6,7,8,bad\n", encoding="utf-8")
    data = load_ocr_data({"path": str(tmp_path), "test": {"images": images.name, "labels": truth.name}})
    with caplog.at_level(logging.WARNING):
        split = read_ocr_split(data, "test")
    assert [p.name for p in split.images] == ["img_1.jpg", "img_2.jpg"] and len(split.lines[1]) == 0
    first = split.lines[0]
    assert [(b.text, b.ignore) for b in first] == [("Genaxis Theatre", False), ("###", True), ("a,b", False)]
    assert first[0].points.tolist() == [[377, 117], [463, 117], [465, 130], [378, 130]]
    assert "no gt_img_3.txt or img_3.txt" in caplog.text and "first eight fields must be numbers" in caplog.text


def test_the_bundled_set_labels_every_word_where_it_is_printed(text_set: Path) -> None:
    split = get_task("ocr").load_split(str(text_set), "val")
    assert len(split) == 6
    for image, boxes in zip(split.images, split.lines, strict=True):
        h, w = np.asarray(Image.open(image)).shape[:2]
        assert (h, w) == (240, 320) and 1 <= len([b for b in boxes if not b.ignore]) <= 3
        for box in boxes:
            assert box.ignore or box.text in WORDS
            assert (box.points >= 0).all() and (box.points[:, 0] <= w).all() and (box.points[:, 1] <= h).all()
            ink = np.asarray(Image.open(image).convert("L"))[
                int(box.points[0, 1]):int(box.points[2, 1]) + 1, int(box.points[0, 0]):int(box.points[2, 0]) + 1]
            assert ink.min() < 120  # dark print inside the box


def test_scoring_worked_by_hand() -> None:
    assert polygon_iou(square(0, 0, 10), square(5, 0, 10)) == pytest.approx(50 / 150)
    labels = [TextBox(square(0, 0, 10), "ab", False), TextBox(square(20, 0, 10), "cd", False),
              TextBox(square(40, 0, 10), "###", True)]
    found = score_picture(labels, [square(1, 0, 10), square(20, 1, 10), square(41, 0, 8), square(60, 60, 5)],
                          ["ab", "cx", "zz", "ghost"])
    # the third lies inside the region not to score (left out); the fourth matches nothing
    assert (found.lines, found.detections, found.matches, found.read) == (2, 3, 2, 1)
    twice = score_picture(labels[:1], [square(0, 0, 10), square(0, 0, 10)], ["ab", "ab"])
    assert (twice.matches, twice.detections) == (1, 2)  # one to one: the second copy is a false positive
    result = total(np.array([3, 4, 2, 1]), n_images=2)
    assert result.precision == 0.5 and result.recall == pytest.approx(2 / 3) and result.word_acc == 0.5
    assert result.hmean == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert result.e2e_hmean == pytest.approx(2 * 0.25 * (1 / 3) / (0.25 + 1 / 3)) == result.fitness
    assert set(result.as_dict()) == {"metrics/precision", "metrics/recall", "metrics/hmean", "metrics/word_acc",
                                     "metrics/e2e_hmean"}
    assert "H-mean" in result.table() and "end-to-end" in result.summary()


def test_val_runs_on_random_weights_and_the_command_line(text_set: Path, tmp_path: Path) -> None:
    from libreyolo_cli.main import main

    metrics = LibreYOLO("LibrePPOCRm.yaml").val(data=str(text_set), imgsz=320, batch=4, verbose=False)
    assert metrics.n_images == 6 and metrics.lines >= 6 and 0.0 <= metrics.fitness <= 1.0
    code = main(["val", "model=LibrePPOCRm.yaml", f"data={text_set}", "imgsz=320", "batch=2"])
    assert code == 0


def test_converted_weights_read_the_bundled_set(text_set: Path, tmp_path: Path) -> None:
    from ppocr_weights import converted_weights

    from libreyolo_models.convert import convert_ppocr

    _, folder = converted_weights()
    model = LibreYOLO(str(convert_ppocr(folder, tmp_path / "LibrePPOCRm.pt")))
    metrics = model.val(data=str(text_set), batch=2, verbose=False)
    assert metrics.hmean >= 0.9 and metrics.word_acc >= 0.9, metrics.summary()
