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
    assert "prompt-segment  b,l,h" in out  # every column at least as wide as its longest entry
    assert main(["info", "--json"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    yolo9 = next(r for r in rows if r["family"] == "yolo9")
    assert yolo9["task"] == "detect" and yolo9["cuda_graph_predict"] and yolo9["losses"] == ["box", "cls", "dfl"]


@pytest.mark.parametrize(("words", "expected"), [
    (["train", "--help"], ["libreyolo train model=", "epochs=100", "channels_last=auto", "cuda_graph=False",
                           "tensorboard=False", "mlflow=False", "wandb=False", "log_every=50", "plots=True"]),
    (["predict", "-h"], ["libreyolo predict model=", "conf=0.25", "fuse=None", "save_txt=False",
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


def test_checks_reports_versions_extras_and_the_cache_folder(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["checks", "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["packages"]["libreyolo-models"] and report["packages"]["torch"]
    assert report["cache_dir"] == str(tmp_path / "cache") and not report["cache_dir_exists"]
    assert report["extras"]["onnx"]["onnxruntime"] and "CPUExecutionProvider" in report["onnxruntime_providers"]
    assert main(["checks"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "CUDA:" in out and "NCCL:" in out and "extra [openvino]: openvino" in out
    assert f"cache folder: {tmp_path / 'cache'} (not created yet)" in out


def test_export_writes_a_file_that_predicts(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    target = tmp_path / "t.onnx"
    assert main(["export", "model=LibreYOLO9t.yaml", "format=onnx", "imgsz=64", f"file={target}"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == str(target)
    assert main(["predict", f"model={target}", "imgsz=64"]) == EXIT_OK
    assert main(["export", f"model={target}", "format=onnx"]) == EXIT_USAGE
    assert "cannot export" in capsys.readouterr().err


def test_benchmark_prints_a_table_of_formats(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from libreyolo_models.data.shapes import generate_shapes

    generate_shapes(tmp_path / "data", split_sizes={"train": 1, "val": 4})  # shapes' five classes, 4 images
    data = tmp_path / "data" / "data.yaml"
    arch = tmp_path / "five.yaml"
    arch.write_text("family: yolo9\nsize: t\nnc: 5\nimgsz: 64\n")
    # One format: the exports themselves are tested in libreyolo-models (test_benchmark.py); a
    # TorchScript row here cost 5-9 s of tracing on the shared CPU.
    words = ["benchmark", f"model={arch}", f"data={data}", "formats=pytorch", "runs=1", "warmup=0",
             f"project={tmp_path / 'runs'}"]
    assert main(words) == EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("benchmark of") and "mAP50-95" in lines[1]
    assert [line.split()[:2] for line in lines[2:]] == [["pytorch", "fp32"]]
    assert main(["benchmark", "model=LibreYOLO9t.yaml", f"data={data}"]) == EXIT_USAGE  # 80 classes vs 5
    assert "has 5 classes but the model predicts 80" in capsys.readouterr().err


def test_help_lists_export_and_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "libreyolo export model=" in out and "libreyolo checks" in out and "checks, export" in out
    assert main(["export", "--help"]) == EXIT_OK
    assert "format=onnx" in capsys.readouterr().out
# --- user mistakes: one line on stderr, the README's exit code, no traceback, nothing run ---------


def _bad_data(tmp_path) -> str:
    (tmp_path / "data.yaml").write_text("train: images/train\nnames: [a]\n")  # the folder does not exist
    return str(tmp_path / "data.yaml")


@pytest.mark.parametrize(("words", "code", "message"), [
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "device=0,1"], EXIT_USAGE, "asks for CUDA"),
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "device=cuda:7"], EXIT_USAGE, "asks for CUDA"),
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "device=mps"], EXIT_USAGE, "asks for Apple's GPU"),
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "device=gpu"], EXIT_USAGE, "device='gpu'"),
    (["train", "model=LibreYOLO9t.yaml", "data=shapes", "batch=30", "device=cpu", "cache=rma"], EXIT_USAGE,
     "did you mean 'ram'"),
    (["train", "model=", "data=shapes"], EXIT_USAGE, "option 'model' has no value"),
    (["predict", "model=LibreYOLO9t.yaml", "source="], EXIT_USAGE, "option 'source' has no value"),
    (["version", "foo=1"], EXIT_USAGE, "'libreyolo version' takes no options; got 'foo'"),
    (["cache", "purge"], EXIT_USAGE, "takes one of list, clean, not 'purge'"),
])
def test_user_mistakes_are_one_line_with_the_readme_exit_code(capsys, words, code, message) -> None:
    import torch

    if "asks for" in message and (torch.cuda.is_available() or torch.backends.mps.is_available()):
        pytest.skip("this machine has the device")
    assert main(words) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("libreyolo: error: ")


def test_bad_data_is_a_failed_run_not_a_usage_error(capsys, tmp_path) -> None:
    assert main(["train", "model=LibreYOLO9t.yaml", f"data={_bad_data(tmp_path)}", "device=cpu", "val=false"]) \
        == EXIT_FAILED
    err = capsys.readouterr().err
    assert "train: " in err and "does not exist" in err and "Traceback" not in err


def test_a_text_file_named_pt_is_a_failed_run_naming_the_file(capsys, tmp_path) -> None:
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    assert main(["info", f"model={tmp_path / 'notes.pt'}"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "notes.pt' is not a checkpoint" in err and "Traceback" not in err


def test_cache_lists_and_cleans_image_caches(capsys, tmp_path, monkeypatch) -> None:
    import numpy as np
    from PIL import Image

    from libreyolo_models.data.image_cache import open_image_cache

    # Cache folders of its own (disk and RAM): other tests of the session (validation, training)
    # leave caches in the shared ones, and this test counts what "clean" removes.
    monkeypatch.setenv("LIBREYOLO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv("LIBREYOLO_SHM_DIR", str(tmp_path / "shm"))
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    folder = tmp_path / "caches"
    path = open_image_cache([tmp_path / "a.png"], 8, mode="disk", cache_dir=folder).path
    assert path.parent == folder
    assert main(["cache", f"dir={folder}"]) == EXIT_OK
    out = capsys.readouterr().out
    assert path.name in out and "unused" in out and f"from {tmp_path}" in out
    assert main(["cache", "clean", f"dir={folder}"]) == EXIT_OK
    assert "removed 1 image cache(s)" in capsys.readouterr().out and not path.exists()
