"""The ``libreyolo`` command run in-process: outputs and documented exit codes."""

from __future__ import annotations

import json

import pytest

from libreyolo_cli.main import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main


def test_version_lists_every_package(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == EXIT_OK
    out = capsys.readouterr().out
    for dist in ("libreyolo ", "libreyolo-models", "libreyolo-cudagraph", "libreyolo-ddp", "libreyolo-cli", "torch"):
        assert dist in out


def test_info_reports_the_architecture_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "model=LibreYOLO9t.yaml", "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert (info["family"], info["size"], info["parameters"], info["nc"]) == ("yolo9", "t", 2036544, 80)


def test_predict_prints_one_line_per_image(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from libreyolo_models import SAMPLE_IMAGE

    code = main(["predict", "model=LibreYOLO9t.yaml", f"source={SAMPLE_IMAGE}", "imgsz=64", "--save",
                 "--save-txt", "--save-conf", "--save-crop", "--agnostic-nms", f"project={tmp_path}"])
    assert code == EXIT_OK
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(str(SAMPLE_IMAGE))
    assert (tmp_path / "exp" / "sample.jpg").is_file()
    # An untrained model finds nothing: the label file exists and is empty, no crops are cut.
    assert (tmp_path / "exp" / "labels" / "sample.txt").read_text() == ""
    assert not (tmp_path / "exp" / "crops").exists()


def test_info_without_a_model_lists_every_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "yolo9" in out and "t,s,m,c" in out and "LibreYOLO9t.pt" in out
    assert main(["info", "--json"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    yolo9 = next(r for r in rows if r["family"] == "yolo9")
    assert yolo9["task"] == "detect" and yolo9["cuda_graph_predict"] and yolo9["losses"] == ["box", "cls", "dfl"]


@pytest.mark.parametrize(("words", "expected"), [
    (["train", "--help"], ["libreyolo train model=", "epochs=100", "channels_last=auto", "cuda_graph=False",
                           "tensorboard=False", "mlflow=False", "wandb=False", "log_every=50", "plots=True"]),
    (["predict", "-h"], ["libreyolo predict model=", "conf=0.25", "fuse=False", "save_txt=False",
                         "save_conf=False", "save_crop=False", "show=False", "agnostic_nms=False"]),
    (["val", "data=shapes", "--help"], ["libreyolo val model=", "batch=16", "fuse=False", "plots=False",
                                        "save_json=False"]),
    (["info", "--help"], ["libreyolo info [model=...] [--json]"]),
])
def test_command_help_lists_every_option_with_its_default(words, expected, capsys) -> None:
    assert main(words) == EXIT_OK  # no model is loaded, nothing runs
    out = capsys.readouterr().out
    for text in expected:
        assert text in out, text
    assert "sync_bn" not in out  # a Python-only argument


@pytest.mark.parametrize(("words", "code", "message"), [
    (["predcit"], EXIT_USAGE, "did you mean 'predict'"),
    ([], EXIT_USAGE, "Commands:"),
    (["predict", "model=LibreYOLO9t.yaml", "cnof=0.5"], EXIT_USAGE, "did you mean 'conf'"),
    (["predict", "model=LibreYOLO9t.yaml", "imgsz=big"], EXIT_USAGE, "imgsz='big' is not valid"),
    (["predict"], EXIT_USAGE, "needs model="),
    (["predict", "model=LibreYOLO9t.yaml", "source=/nope/missing.jpg"], EXIT_FAILED, "/nope/missing.jpg"),
    (["info", "model=missing-file.pt"], EXIT_FAILED, "weights 'missing-file.pt' not found"),
])
def test_errors_have_documented_exit_codes(capsys, words, code, message) -> None:
    assert main(words) == code
    captured = capsys.readouterr()
    assert message in captured.err + captured.out
