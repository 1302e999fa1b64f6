"""The ``libreyolo`` command.

    libreyolo predict model=LibreYOLO9t.pt source=img.jpg conf=0.3 --save
    libreyolo track model=LibreYOLO9t.pt source=video.mp4 tracker=bytetrack --save
    libreyolo train model=LibreYOLO9t.yaml data=shapes epochs=10 imgsz=256 device=cpu
    libreyolo val model=runs/train/exp/weights/best.pt data=shapes
    libreyolo export model=best.pt format=onnx imgsz=640 --dynamic   (then model=best.onnx predicts)
    libreyolo export model=best.pt format=openvino int8=True data=coco.yaml   (INT8, calibrated)
    libreyolo benchmark model=best.pt data=shapes   (size, latency, mAP of every export format here)
    libreyolo info model=LibreYOLO9t.pt
    libreyolo checks           (versions, CUDA, GPUs, NCCL, extras, cache folder)
    libreyolo cache            (image caches; 'libreyolo cache clean' removes unused ones)
    libreyolo version
    libreyolo train --help     (every option of a command, with its default)

Exit codes: 0 success; 1 the run failed (bad data, unreadable weights or inputs, a training error);
2 the command line is wrong (unknown command or option, bad or empty value, a device this machine
lacks); 130 interrupted (Ctrl-C). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import logging
import sys

from .arguments import UsageError, parse_words
from .commands import COMMANDS, command_help, run_command

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

USAGE = __doc__.split("Exit codes")[0].strip() + "\n\nCommands: " + ", ".join(sorted(COMMANDS))


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if not words or words[0] in ("-h", "--help", "help"):
        print(USAGE)
        return EXIT_OK if words else EXIT_USAGE
    if words[0] in COMMANDS and any(w in ("-h", "--help") for w in words[1:]):
        print(command_help(words[0]))
        return EXIT_OK
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        parsed = parse_words(words)
        return run_command(parsed)
    except KeyboardInterrupt:
        print("libreyolo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:
        code = exit_code(err)
        if code is None:
            raise  # not a user's mistake nor a failed run: a bug, whose traceback is the report
        prefix = "error" if code == EXIT_USAGE else type(err).__name__
        print(f"libreyolo: {prefix}: {err}", file=sys.stderr)
        return code


def exit_code(err: BaseException) -> int | None:
    """The README's exit code for ``err``: 2 a wrong command line, 1 a failed run; None for a bug.

    Bad data (a dataset description, a split, an image) fails the run (1) even though it is a
    ``ConfigError``: the command line was fine, the files were not.
    """
    from libreyolo_ddp import BatchSplitError, DDPError, DeviceError
    from libreyolo_models.data.errors import DataConfigError
    from libreyolo_models.errors import ConfigError, LibreYOLOError

    if isinstance(err, DataConfigError):
        return EXIT_FAILED
    if isinstance(err, UsageError | ConfigError | DeviceError | BatchSplitError):
        return EXIT_USAGE
    if isinstance(err, LibreYOLOError | DDPError | OSError | NotImplementedError | RuntimeError):
        return EXIT_FAILED
    if isinstance(err, ModuleNotFoundError):  # a package this run needs is missing: the install, not a bug
        return EXIT_FAILED
    return None


def entry() -> None:  # pragma: no cover - console-script shim
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
