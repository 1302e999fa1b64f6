"""Command-line word parsing: key=value, --flag, --no-flag, --key=value, and its errors."""

from __future__ import annotations

import pytest

from libreyolo_cli.arguments import UsageError, parse_words


def test_key_value_and_flags() -> None:
    parsed = parse_words(["train", "model=LibreYOLO9t.yaml", "epochs=3", "--cuda-graph", "--no-save", "--imgsz=64"])
    assert parsed.command == "train"
    assert parsed.options == {"model": "LibreYOLO9t.yaml", "epochs": "3", "cuda_graph": True, "save": False,
                              "imgsz": "64"}


def test_values_may_contain_equals_signs() -> None:
    assert parse_words(["predict", "source=a=b.jpg"]).options == {"source": "a=b.jpg"}


@pytest.mark.parametrize(("words", "match"), [
    (["predict", "model=a", "model=b"], "given twice"),
    (["predict", "stray"], "unexpected word 'stray'"),
    (["predict", "=3"], "missing the option name"),
])
def test_malformed_command_lines_are_explained(words: list[str], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_words(words)
