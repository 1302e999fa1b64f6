"""Measure every family's training numerics class (two eager runs, one graphed, N steps), each row
in a fresh process, and write the certificates and their table.

Per family x size x task x precision (``amp`` = fp16 autocast, ``fp32``) on the device: the
training seam is trained three times from one seeded state for ``--steps`` steps on the same
synthetic batches (``libreyolo_models.train.numerics``); the graphed run is classed against the
two eager ones: ``exact``, ``eager-noise`` (the eager-vs-eager spread is reported) or ``diverges``
(a bug: never declared supported). Writes:

- the block between the ``numerics-classes`` markers of ``docs/parity-matrix.md`` (``--out``),
  the rest of that file untouched (``tools/parity_matrix.py`` keeps the block too);
- with ``--certificates``, the certificate table merged row by row (a row is family, size,
  task, precision, device) into that JSON file: the one shipped with the package is
  ``packages/libreyolo-models/src/libreyolo_models/assets/certificates.json``, which training
  checkpoints and ``graph_info()`` read.

    python tools/numerics_classes.py --certificates packages/libreyolo-models/src/libreyolo_models/assets/certificates.json
    python tools/numerics_classes.py --rows yolo9:t,rtdetr:r18 --precisions fp32 --out /tmp/n.md
    python tools/numerics_classes.py --smallest --families yolo9,rtdetr   # each family's first size
    python tools/numerics_classes.py --rows yolo9:t --device cpu --candidate eager --imgsz 64 --batch 2 --steps 3 \
        --out /tmp/n.md   # a CPU dry run: the third run is eager, and every row says "not graphed"

Needs a CUDA GPU for the graphed candidate (``--candidate graph``, the default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from report import side_by_side_env

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- numerics-classes:start"  # a block starts at a comment that begins so
START = f"{MARK}: written by tools/numerics_classes.py; edit the tool, not this block -->"
END = "<!-- numerics-classes:end -->"
GROUPS = ("loss", "weights", "grads", "buffers")


def measure_one(family: str, size: str, task: str, precision: str, args: argparse.Namespace) -> dict[str, Any]:
    """The child's work: one row, as the certificate's dict plus the report's summary."""
    from libreyolo_models.train.numerics import measure_numerics

    report, cert = measure_numerics(family, size, task, imgsz=args.imgsz, batch=args.batch, steps=args.steps,
                                    amp=precision == "amp", device=args.device, candidate=args.candidate)
    return {"certificate": cert.to_dict(), "summary": report.summary()}


def _run_child(family: str, size: str, task: str, precision: str, args: argparse.Namespace,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", family, size, task, precision, "--batch", str(args.batch),
           "--steps", str(args.steps), "--device", args.device, "--candidate", args.candidate]
    if args.imgsz:
        cmd += ["--imgsz", str(args.imgsz)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"row": [family, size, task, precision], "error": f"timed out after {args.timeout_s:g} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"row": [family, size, task, precision], "error": proc.stderr[-2000:] or "no result",
                "seconds": time.perf_counter() - started}
    data = json.loads(lines[-1][len("RESULT "):])
    data["seconds"] = time.perf_counter() - started
    return data


def _key(cert: dict[str, Any]) -> tuple[str, ...]:
    return cert["family"], cert["size"], cert["task"], cert["dtype"], cert["device"]


def merge_certificates(path: Path, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The certificates in ``path`` with each of ``new`` replacing the row of its key; written back."""
    old = json.loads(path.read_text()) if path.is_file() else []
    merged = {_key(c): c for c in old}
    merged.update({_key(c): c for c in new})
    rows = sorted(merged.values(), key=_key)
    path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return rows


def _groups(values: dict[str, float]) -> str:
    return " / ".join(f"{values[g]:.2g}" if g in values else "-" for g in GROUPS) if values else "-"


def render_block(certs: list[dict[str, Any]], errors: list[dict[str, Any]], command: str) -> str:
    """The markdown block: one row per certificate, then the rows that failed to measure."""
    lines = [
        START,
        "## Training numerics classes",
        "",
        f"Written by `{command}`. Each row: three copies of the training seam trained from one seeded state",
        "on the same synthetic batches (SGD, lr 0.01, momentum 0.9, gradients clipped at 10): eager,",
        "eager again, graphed. Spread = eager-vs-eager relative L2 distance after the last step, per",
        "group (every step's loss / final weights / last gradients / buffers); graphed = graphed-vs-eager.",
        "`exact`: both bit-identical to eager; `eager-noise`: eager already differs from itself and graphed",
        "stays within 4x its spread in every group (a `nan` spread: eager's own runs disagree on non-finite",
        "values, an fp16 overflow the grad scaler skips, and that group does not judge); `diverges`: graphed",
        "differs beyond that (a bug; the capture stays undeclared). `graphed` no: the third run did not",
        "replay graphs (CPU dry run).",
        "",
        "| family | size | task | precision | device | class | graphed | spread (loss / weights / grads / buffers) "
        "| graphed vs eager | measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in certs:
        where = ", ".join(str(v) for v in (c.get("gpu") or "CPU", f"torch {c.get('torch')}", c.get("date")) if v)
        lines.append(f"| {c['family']} | {c['size']} | {c['task']} | {c['dtype']} | {c['device']} | "
                     f"{c['numerics_class']} | {'yes' if c['graphed'] else 'no'} | {_groups(c.get('spread', {}))} | "
                     f"{_groups(c.get('distance', {}))} | {where}; {c.get('source', '')} |")
    for e in errors:
        last = e["error"].strip().splitlines()[-1] if e["error"].strip() else "crashed"
        lines.append(f"| {' | '.join(e['row'])} | - | error | - | - | - | {last.replace('|', '/')} |")
    if not certs and not errors:
        lines.append("| (no row measured yet) | | | | | | | | | |")
    lines.append(END)
    return "\n".join(lines)


def find_block(text: str) -> tuple[int, int] | None:
    """Where the block is in ``text`` (start, end offsets), or None."""
    start = text.find(MARK)
    end = text.find(END, start) if start >= 0 else -1
    return (start, end + len(END)) if end >= 0 else None


def write_block(out: Path, block: str) -> None:
    """Replace the block in ``out`` (appended when absent); the rest of the file is kept."""
    text = out.read_text() if out.is_file() else ""
    found = find_block(text)
    if found is not None:
        text = text[:found[0]] + block + text[found[1]:]
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + block + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def _jobs(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    from libreyolo_models.zoo.registry import families

    table = families()
    precisions = args.precisions.split(",")
    if args.rows:
        parts = [row.split(":") for row in args.rows.split(",")]
        rows = [(p[0], p[1], p[2] if len(p) > 2 else table[p[0]].default_task) for p in parts]
    else:
        chosen = args.families.split(",") if args.families else sorted(table)

        def sizes(family: str, task: str) -> tuple[str, ...]:
            own = table[family].sizes_for(task)
            if args.smallest:
                return own[:1]
            return tuple(s for s in args.sizes.split(",") if s in own) if args.sizes else own

        rows = [(f, s, t) for f in chosen for t in table[f].tasks for s in sizes(f, t)]
    return [(f, s, t, p) for f, s, t in rows for p in precisions]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=4, metavar=("FAMILY", "SIZE", "TASK", "PRECISION"), help=argparse.SUPPRESS)
    parser.add_argument("--families", default=None, help="comma-separated (default: every registered family)")
    parser.add_argument("--sizes", default=None, help="comma-separated (default: every size of each family)")
    parser.add_argument("--smallest", action="store_true", help="one size per family: its first (smallest)")
    parser.add_argument("--rows", default=None, help="exact rows instead: family:size[:task],... (e.g. yolo9:t)")
    parser.add_argument("--precisions", default="amp,fp32", help="comma-separated: amp (fp16 autocast), fp32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--imgsz", type=int, default=None, help="default: each family's own image size")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--candidate", choices=("graph", "eager"), default="graph",
                        help="the third run: graphed (default), or eager (a CPU dry run)")
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--jobs", type=int, default=1,
                        help="rows measured at once (child processes sharing the GPU, each with a share of "
                             "the CPU threads); each row is published as it finishes")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "parity-matrix.md")
    parser.add_argument("--certificates", type=Path, default=None,
                        help="merge the certificates into this JSON table (the package's: see the docstring)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    args = parser.parse_args()
    if args.one:
        family, size, task, precision = args.one
        data = measure_one(family, size, task, precision, args)
        print("RESULT " + json.dumps(data), flush=True)
        return 0
    results: list[dict[str, Any]] = []
    command = "python tools/numerics_classes.py" + (f" --device {args.device}" if args.device != "cuda" else "")
    block = ""
    env = side_by_side_env(args.jobs)
    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    futures = []
    for family, size, task, precision in _jobs(args):
        print(f"measuring {family}-{size} {task} {precision} ...", file=sys.stderr, flush=True)
        futures.append(pool.submit(_run_child, family, size, task, precision, args, env))
    for future in as_completed(futures):
        result = future.result()
        results.append(result)
        cert = result.get("certificate")
        name = (" ".join((f"{cert['family']}-{cert['size']}", cert["task"], cert["dtype"])) if cert
                else " ".join(result.get("row", [])))
        print(f"  {name}: {result.get('summary') or 'ERROR: ' + result['error'][-800:]}", file=sys.stderr, flush=True)
        block = _publish(results, args, command)  # after every row: a run stopped early keeps what it measured
    pool.shutdown()
    print(block)
    certs = [r["certificate"] for r in results if "certificate" in r]
    return 0 if len(certs) == len(results) and all(c["numerics_class"] != "diverges" for c in certs) else 1


def _publish(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    """Write the rows measured so far: certificates merged, the block, the raw JSON."""
    certs = [r["certificate"] for r in results if "certificate" in r]
    errors = [r for r in results if "error" in r]
    shown = merge_certificates(args.certificates, certs) if args.certificates else sorted(certs, key=_key)
    block = render_block(shown, errors, command)
    write_block(args.out, block)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return block


if __name__ == "__main__":
    sys.exit(main())
