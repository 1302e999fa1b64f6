"""The ``libreyolo`` command.

    libreyolo predict model=LibreYOLO9t.pt source=img.jpg conf=0.3 --save
    libreyolo train model=LibreYOLO9t.yaml data=shapes epochs=10 imgsz=256 device=cpu
    libreyolo val model=runs/train/exp/weights/best.pt data=shapes
    libreyolo export model=best.pt format=onnx imgsz=640 --dynamic   (then model=best.onnx predicts)
    libreyolo info model=LibreYOLO9t.pt
    libreyolo checks           (versions, CUDA, GPUs, NCCL, extras, cache folder)
    libreyolo version
    libreyolo train --help     (every option of a command, with its default)

Exit codes: 0 success; 1 the run failed (bad data, unreadable weights, a training error);
2 the command line is wrong (unknown command or option, bad value); 130 interrupted (Ctrl-C).
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
    from libreyolo_models.errors import ConfigError, LibreYOLOError

    try:
        parsed = parse_words(words)
        return run_command(parsed)
    except (UsageError, ConfigError) as err:
        print(f"libreyolo: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("libreyolo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (LibreYOLOError, FileNotFoundError, NotImplementedError, RuntimeError, OSError) as err:
        print(f"libreyolo: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED


def entry() -> None:  # pragma: no cover - console-script shim
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
