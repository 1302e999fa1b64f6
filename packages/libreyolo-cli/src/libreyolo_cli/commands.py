"""One function per ``libreyolo`` command; each takes the parsed options and returns an exit code."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .arguments import ParsedArgs, UsageError

if TYPE_CHECKING:
    from libreyolo_models import LibreYOLO


def _suggest(word: str, known: list[str]) -> str:
    import difflib

    hint = difflib.get_close_matches(word, known, n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def _take_model(options: dict[str, object], command: str, default: str | None = None) -> LibreYOLO:
    from libreyolo_models import LibreYOLO

    name = options.pop("model", default)
    task = options.pop("task", None)  # task=pose: which of the family's tasks an architecture builds
    if name is None:
        raise UsageError(f"'libreyolo {command}' needs model=... (a .pt checkpoint, a weights name such as "
                         "LibreYOLO9t.pt, or an architecture such as LibreYOLO9t.yaml)")
    return LibreYOLO(str(name), task=None if task is None else str(task))


def cmd_predict(options: dict[str, object]) -> int:
    from libreyolo_models import SAMPLE_IMAGE

    model = _take_model(options, "predict")
    source = options.pop("source", str(SAMPLE_IMAGE))
    options.setdefault("stream", True)  # print each result as it comes (videos, cameras)
    results = model.predict(str(source), **options)
    for res in results:
        print(f"{res.path}: {res.summary()} ({res.speed['inference']:.1f} ms)")
    return 0


def cmd_track(options: dict[str, object]) -> int:
    """Track objects through a video, stream or frame folder; one line per frame with the ids."""
    if "source" not in options:
        raise UsageError("'libreyolo track' needs source=... (a video file, a stream URL, a camera index "
                         "or a folder of frames)")
    if "persist" in options or "stream" in options:
        key = "persist" if "persist" in options else "stream"
        raise UsageError(f"'libreyolo track' does not take {key}=: it tracks one source per run, frame by "
                         f"frame (use model.track(..., {key}=True) from Python)")
    model = _take_model(options, "track")
    source = str(options.pop("source"))
    tracker = str(options.pop("tracker", "bytetrack"))
    predict_and_tracker: dict[str, Any] = dict(options)   # checked and converted by model.track
    for res in model.track(source, tracker=tracker, stream=True, **predict_and_tracker):
        frame = getattr(res, "frame", None)
        where = res.path if frame is None else f"{getattr(res, 'source', res.path)} frame {frame}"
        ids = res.boxes.id.tolist() if res.boxes is not None and res.boxes.id is not None else []
        print(f"{where}: {len(ids)} tracked, ids {ids} ({res.speed.get('inference', 0.0):.1f} ms)")
    return 0


def cmd_train(options: dict[str, object]) -> int:
    model = _take_model(options, "train")
    outcome = model.train(**options)
    print(outcome.summary() if hasattr(outcome, "summary") else outcome)
    return 0


def cmd_val(options: dict[str, object]) -> int:
    model = _take_model(options, "val")
    metrics = model.val(**options)
    from libreyolo_models.config import coerce

    verbose = coerce(options.get("verbose", True), bool, "verbose", "libreyolo val")
    if not verbose:  # else validation has logged the table already
        print(metrics.table())
    print(" ".join(f"{key.split('/')[-1]}={value:.4f}" for key, value in metrics.as_dict().items()))
    return 0


def cmd_info(options: dict[str, object]) -> int:
    as_json = bool(options.pop("json", False))
    if "model" not in options and not options:
        return _list_families(as_json)
    model = _take_model(options, "info")
    if options:
        key = sorted(options)[0]
        raise UsageError(f"'libreyolo info' takes model= and --json only; unknown option {key!r}")
    info = model.info()
    info["names"] = model.names
    if as_json:
        print(json.dumps(info, indent=2, default=str))
    else:
        for key, value in info.items():
            print(f"{key}: {value}")
    return 0


def _list_families(as_json: bool) -> int:
    """``libreyolo info`` without a model: every family, its sizes, tasks and what it supports."""
    from libreyolo_models import families

    rows: list[dict[str, Any]] = []
    for spec in families().values():
        for task, decl in spec.tasks.items():
            rows.append({"family": spec.name, "name": spec.display_name, "task": task, "sizes": list(spec.sizes_for(task)),
                         "weights": spec.weight_name(spec.default_size, task),
                         "imgsz": spec.default_imgsz(spec.default_size, task),
                         "cuda_graph_predict": decl.inference_capture, "cuda_graph_train": decl.train_capture,
                         "multi_gpu_spawn": spec.ddp_autospawn, "sync_bn": spec.sync_bn_default,
                         "losses": list(decl.loss_names), "summary": spec.summary})
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    # Columns as wide as their longest entry (RT-DETR lists seven sizes, "efficientnetv2" is a
    # long family name, "prompt-segment" a long task), at least the header's.
    fw = max(10, *(len(r["family"]) + 2 for r in rows))
    tw = max(10, *(len(r["task"]) + 2 for r in rows))
    sw = max(22, *(len(",".join(r["sizes"])) + 2 for r in rows))
    ww = max(22, *(len(r["weights"]) + 2 for r in rows))
    header = f"{'family':<{fw}}{'task':<{tw}}{'sizes':<{sw}}{'example':<{ww}}{'imgsz':>6}  graphs(predict/train)  spawn"
    print(header)
    for r in rows:
        graphs = f"{'yes' if r['cuda_graph_predict'] else 'no'}/{'yes' if r['cuda_graph_train'] else 'no'}"
        print(f"{r['family']:<{fw}}{r['task']:<{tw}}{','.join(r['sizes']):<{sw}}{r['weights']:<{ww}}{r['imgsz']:>6}  "
              f"{graphs:<21}  {'yes' if r['multi_gpu_spawn'] else 'torchrun'}")
    print("\nlibreyolo info model=<weights or .yaml> describes one model.")
    return 0


def cmd_version(options: dict[str, object]) -> int:
    from importlib.metadata import PackageNotFoundError, version

    if options:
        raise UsageError(f"'libreyolo version' takes no options; got {sorted(options)[0]!r}")
    import torch

    for dist in ("libreyolo", "libreyolo-models", "libreyolo-cudagraph", "libreyolo-ddp", "libreyolo-cli"):
        try:
            print(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            print(f"{dist} (not installed)")
    print(f"torch {torch.__version__} (CUDA {'available' if torch.cuda.is_available() else 'not available'})")
    print(f"python {sys.version.split()[0]}")
    return 0


def cmd_export(options: dict[str, object]) -> int:
    model = _take_model(options, "export")
    print(model.export(**options))
    return 0


def cmd_benchmark(options: dict[str, object]) -> int:
    """Export to every format this machine runs and print size, latency and accuracy per format."""
    model = _take_model(options, "benchmark")
    print(model.benchmark(**options).table())
    return 0


def cmd_checks(options: dict[str, object]) -> int:
    from libreyolo_models.environment import environment_report

    as_json = bool(options.pop("json", False))
    if options:
        raise UsageError(f"'libreyolo checks' takes --json only; unknown option {sorted(options)[0]!r}")
    report = environment_report()
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"python {report['python']} on {report['platform']}")
    for name, version in report["packages"].items():
        print(f"{name} {version or '(not installed)'}")
    print(f"CUDA: {'available' if report['cuda_available'] else 'not available'} "
          f"(torch built with CUDA {report['torch_cuda'] or 'none'})")
    for gpu in report["gpus"]:
        print(f"  GPU {gpu['index']}: {gpu['name']}, {gpu['memory_gib']} GiB, compute {gpu['capability']}")
    print(f"NCCL: {report['nccl'] or 'not available'}; Gloo: {'yes' if report['gloo'] else 'no'}")
    for extra, found in report["extras"].items():
        versions = ", ".join(f"{d} {v}" for d, v in found.items()) if found else \
            f"not installed (pip install 'libreyolo[{extra}]')"
        print(f"extra [{extra}]: {versions}")
    if report["onnxruntime_providers"] is not None:
        print(f"onnxruntime providers: {', '.join(report['onnxruntime_providers'])}")
    print(f"cache folder: {report['cache_dir']}{'' if report['cache_dir_exists'] else ' (not created yet)'} "
          f"(set {report['cache_dir_env']} to move it)")
    return 0


def cmd_cache(options: dict[str, object], action: str | None = None) -> int:
    """``libreyolo cache [list]``: every image cache, its size and whether a run uses it.
    ``libreyolo cache clean [dir=...]``: remove every unused one (RAM and disk, or ``dir``)."""
    from pathlib import Path

    from libreyolo_models.data import cache_store

    folder = options.pop("dir", None)
    if options:
        raise UsageError(f"'libreyolo cache' takes dir=... only; unknown option {sorted(options)[0]!r}")
    folders = [Path(str(folder)).expanduser()] if folder is not None else cache_store.default_folders()
    if action == "clean":
        removed, kept = cache_store.clean_image_caches(folders)
        freed = sum(e.nbytes for e in removed) / 2**20
        print(f"removed {len(removed)} image cache(s), {freed:.1f} MiB freed"
              + (f"; {len(kept)} in use by a running process kept" if kept else ""))
        return 0
    total = 0
    for place in folders:
        entries = cache_store.list_cache_files(place)
        print(f"{place}: {len(entries)} image cache(s)")
        for e in entries:
            total += e.nbytes
            print(f"  {e.path.name}  {e.nbytes / 2**20:.1f} MiB  {'in use' if e.in_use else 'unused'}  "
                  f"from {e.source or '?'}")
    print(f"total {total / 2**20:.1f} MiB; 'libreyolo cache clean' removes every unused cache")
    return 0


COMMANDS: dict[str, Callable[..., int]] = {
    "predict": cmd_predict, "track": cmd_track, "train": cmd_train, "val": cmd_val, "export": cmd_export,
    "benchmark": cmd_benchmark, "info": cmd_info, "checks": cmd_checks, "version": cmd_version, "cache": cmd_cache,
}


# The options each command forwards to the model, as settings dataclasses (module, class), plus the
# words the command itself takes.
_PREDICT = ("libreyolo_models.settings", "PredictConfig")
_SETTINGS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "predict": ([_PREDICT], "model=... source=... (default: the sample image)"),
    "track": ([("libreyolo_models.track", "BoTSORTConfig"), ("libreyolo_models.track", "OCSortConfig"), _PREDICT],
              "model=... source=... tracker=bytetrack (trackers: bytetrack, botsort = bytetrack's options + "
              "cmc_method, ocsort, or module:Class for your own)"),
    "train": ([("libreyolo_models.train.settings", "TrainConfig")], "model=... (architecture, weights or last.pt)"),
    "val": ([("libreyolo_models.val.settings", "ValConfig")], "model=..."),
    "export": ([("libreyolo_models.export.settings", "ExportConfig")],
               "model=... format=onnx|torchscript|openvino|ncnn|tflite|coreml|engine"),
    "benchmark": ([("libreyolo_models.benchmark.settings", "BenchmarkConfig")], "model=... data=shapes"),
}


def command_help(command: str) -> str:
    """``libreyolo <command> --help``: every option with its default, read from the settings class."""
    import dataclasses
    import importlib
    import textwrap

    if command not in _SETTINGS:
        extra = {"info": "[model=...] [--json]   (without model=: every family)",
                 "checks": "[--json]   (versions, CUDA, GPUs, NCCL, extras found, cache folder)",
                 "version": "(no options)",
                 "cache": "[list | clean] [dir=...]   (image caches: list them, or remove every unused one)"
                 }.get(command, "")
        return f"libreyolo {command} {extra}".rstrip()
    classes, own = _SETTINGS[command]
    words: list[str] = []
    for field in (f for module, name in classes for f in dataclasses.fields(
            getattr(importlib.import_module(module), name))):
        if any(w.startswith(f"{field.name}=") for w in words):
            continue  # a field two settings classes share (predict's and a tracker's) is listed once
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else "...")
        if command == "train" and field.name == "sync_bn":
            continue  # a Python argument only (see its comment in TrainConfig)
        words.append(f"{field.name}={default}")
    body = textwrap.fill("  ".join(words), width=100, initial_indent="  ", subsequent_indent="  ",
                         break_on_hyphens=False)
    return (f"libreyolo {command} {own} [key=value ...]\n\noptions and their defaults:\n{body}\n\n"
            "Write options as key=value or --flag / --no-flag; see the package README for what each does.")


def run_command(parsed: ParsedArgs) -> int:
    if parsed.command is None:
        raise UsageError(f"no command given; use one of: {', '.join(sorted(COMMANDS))}")
    if parsed.command not in COMMANDS:
        raise UsageError(f"unknown command {parsed.command!r}{_suggest(parsed.command, list(COMMANDS))}; "
                         f"commands: {', '.join(sorted(COMMANDS))}")
    if parsed.action is not None:
        return COMMANDS[parsed.command](dict(parsed.options), parsed.action)
    return COMMANDS[parsed.command](dict(parsed.options))
