"""``tools/parity_matrix.py`` merges a run of a few rows into the existing page: rows of other
families stay, re-run rows are replaced in place, new ones are appended, and the prose and the
numerics block around the table are kept (a run of twelve rows once replaced the whole table)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import parity_matrix  # noqa: E402


def _row(family: str, ok: bool = True, error: str | None = None) -> dict:
    if error is not None:
        return {"family": family, "size": "t", "task": "detect", "error": error}
    cell = {"ok": ok, "summary": "PASS: bit-identical" if ok else "FAIL x: differs"}
    return {"family": family, "size": "t", "task": "detect", "infer_fp32": cell, "infer_fp16": cell,
            "train_amp": {"ok": True, "summary": "PASS: 3 grads"}}


def test_a_few_rows_update_the_page_and_keep_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "parity-matrix.md"
    parity_matrix.write_markdown([_row("aa"), _row("bb")], page, "cmd", gpu="GPU", torch_version="2", date="d")
    page.write_text(page.read_text() + "\nHow it was run: by hand.\n")
    parity_matrix.write_markdown([_row("bb", ok=False), _row("cc", error="boom\nlast line")], page, "cmd")
    text = page.read_text()
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["family", "aa", "bb", "cc"]
    assert "inference red, training green" in text and "FAIL: last line" in text
    assert "How it was run: by hand." in text and text.count(parity_matrix.TABLE_HEADER) == 1


def test_pretrained_only_rows_say_training_does_not_apply() -> None:
    row = _row("sam")
    row["train_amp"] = {"ok": True, "not_applicable": "pretrained-only", "summary": "n/a: pretrained-only"}
    line = parity_matrix.row_line(row)
    assert line.endswith("| n/a: pretrained-only | inference green, training n/a |")
