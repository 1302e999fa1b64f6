"""Shared output of the benchmark scripts: progress to stderr, the markdown report to stdout and
optionally to a file (so a GPU session can bring it back)."""

from __future__ import annotations

import sys
from pathlib import Path


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit_report(lines: list[str], out: Path | None) -> None:
    text = "\n".join(lines)
    print(text)
    if out is not None:
        out.write_text(text + "\n")
        log(f"wrote {out}")
