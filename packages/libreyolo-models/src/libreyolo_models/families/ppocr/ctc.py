"""CTC greedy decoding with PP-OCR's dictionary (class 0 is the blank, the last class a space)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from torch import Tensor

DICTIONARY = Path(__file__).with_name("ppocr_keys_v1.txt")  # PaddleOCR's ppocr_keys_v1 (Apache-2.0)


@cache
def characters() -> tuple[str, ...]:
    """The class alphabet: blank placeholder, the dictionary's characters, then a space."""
    chars = DICTIONARY.read_text(encoding="utf-8").splitlines()
    return ("", *chars, " ")


def greedy_decode(probs: Tensor) -> list[tuple[str, float]]:
    """``[N, T, classes]`` probabilities -> one ``(text, confidence)`` per row: the best class of
    each step, repeats collapsed, blanks dropped; the confidence is the mean probability of the kept
    steps (0 for an empty string)."""
    alphabet = characters()
    best, index = probs.float().max(dim=2)
    out = []
    for row in range(probs.shape[0]):
        ids, conf = index[row].tolist(), best[row].tolist()
        text, kept = [], []
        for t, c in enumerate(ids):
            if c == 0 or (t > 0 and ids[t - 1] == c):
                continue
            text.append(alphabet[c] if c < len(alphabet) else "")
            kept.append(conf[t])
        out.append(("".join(text), float(sum(kept) / len(kept)) if kept else 0.0))
    return out

