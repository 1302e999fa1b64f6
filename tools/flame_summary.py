"""Inclusive time per function from a py-spy ``--format raw`` profile (collapsed stacks).

    py-spy record --idle --format raw -o prof.txt -- python tools/bench_time_to_accuracy.py --arms ours
    python tools/flame_summary.py prof.txt --match evaluate,write_epoch,_train_epoch --top 40

Every line of the file is ``frame;frame;...;frame count``; a function's inclusive share is the
samples whose stack holds it (once per stack, however deep the recursion). ``--thread`` keeps the
stacks whose outermost frame contains that text (py-spy names no thread in raw output, so the
outermost frame stands for it: ``<module>`` is the main thread, ``_bootstrap`` the others).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_LOCATION = re.compile(r"\s*\(([^()]*)\)\s*$")


def _short(frame: str) -> str:
    """``fn (pkg/mod.py:12)`` -> ``fn (mod.py)``: lines differ per call site, functions do not."""
    match = _LOCATION.search(frame)
    if not match:
        return frame.strip()
    where = match.group(1).rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{frame[:match.start()].strip()} ({where})"


def summarize(path: Path, *, match: list[str], thread: str | None, top: int) -> list[str]:
    inclusive: Counter[str] = Counter()
    roots: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_short(f) for f in stack.split(";")]
        if thread and thread not in frames[0]:
            continue
        n = int(count)
        total += n
        roots[frames[0]] += n
        for name in set(frames):
            inclusive[name] += n
    out = [f"{total} samples" + (f" in stacks rooted at '{thread}'" if thread else "")]
    out += [f"  root {n:7d} {100 * n / max(total, 1):5.1f}%  {name}" for name, n in roots.most_common(6)]
    shown = 0
    for name, n in inclusive.most_common():
        if match and not any(m in name for m in match):
            continue
        out.append(f"{n:7d} {100 * n / max(total, 1):5.1f}%  {name}")
        shown += 1
        if shown >= top:
            break
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--match", default="", help="comma-separated texts; show functions containing any")
    p.add_argument("--thread", help="keep stacks whose outermost frame contains this text")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    print("\n".join(summarize(args.profile, match=[m for m in args.match.split(",") if m], thread=args.thread,
                              top=args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
