"""Certify CUDA-graph parity for every family x size x task, each in a fresh process.

Inference: the family's capture seam (``inference_forward``) replayed on two contrasting probes must
equal eager bit for bit, tell the probes apart, and never serve a stale replay (fp32 weights and
fp16 weights). Training: one step at batch 8 under fp16 autocast, graphed (forward+backward) vs
eager, comparing the loss, every gradient and every BatchNorm buffer, with an eager-vs-eager
control run classifying any difference. Writes ``docs/parity-matrix.md``.

    python tools/parity_matrix.py                      # all families, all sizes
    python tools/parity_matrix.py --sizes t --out /tmp/pm.md
    python tools/parity_matrix.py --rows yolo9:t,rtdetr:r18 --out /tmp/pm.md

A family's ``TaskDecl.inference_capture`` / ``train_capture`` declarations may be True only where
its row here is green. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from report import side_by_side_env

if TYPE_CHECKING:  # the driver imports torch only where it needs it: each row runs in a child process
    import torch

ROOT = Path(__file__).resolve().parents[1]


def _calibrate_batchnorm(net: torch.nn.Module, seam: Callable[[torch.Tensor], Any], imgsz: int,
                         device: torch.device) -> None:
    """Give random-init BatchNorm realistic statistics (two cumulative passes) so fp16 stays finite.
    The passes go through the family's training seam, so a network that normalises its input
    itself (PicoDet, ImageNet mean/std) sees in calibration what the probes give it."""
    import torch

    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not bns:
        net.eval()  # nothing to calibrate, and the probes run the eval-mode network
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    net.train()
    with torch.no_grad():
        for seed in (0, 1):
            g = torch.Generator(device="cpu").manual_seed(seed)
            seam(torch.rand(4, 3, imgsz, imgsz, generator=g).to(device))
    for m, mom in zip(bns, saved):
        m.momentum = mom
    net.eval()


def _to_device(tree: Any, device: torch.device) -> Any:  # Any: targets of any task's schema
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.to(device)
    if isinstance(tree, dict):
        return {k: _to_device(v, device) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_to_device(v, device) for v in tree)
    return tree


def certify_one(family: str, size: str, task: str, imgsz: int | None, train_batch: int) -> dict[str, Any]:
    import torch

    from libreyolo_cudagraph import compare_train_step, contrasting_probes, verify_parity, verify_segmented
    from libreyolo_models import LibreYOLO, LossContext
    from libreyolo_models.contract.family import has_training_head
    from libreyolo_models.graphs import segmented_runner

    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True

    def build() -> LibreYOLO:
        return LibreYOLO(family=family, size=size, task=task, imgsz=imgsz)

    torch.manual_seed(0)
    model = build()
    size_px = model.imgsz
    result: dict[str, Any] = {"family": family, "size": size, "task": task, "imgsz": size_px}
    model.net.to(device)
    skip_training = training_not_applicable(model)
    # A pretrained-only family has no training seam: its BatchNorm statistics come from the
    # inference seam run in train mode (the statistics are all calibration needs).
    _calibrate_batchnorm(model.net, model.inference_forward if skip_training else model.training_forward,
                         size_px, device)
    for dtype_name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        model.net.to(dtype)
        probe_a, probe_b = contrasting_probes((1, 3, size_px, size_px), dtype=dtype, device=device)
        stages = model.family.inference_stages(model.net)
        with torch.inference_mode():
            if stages:  # multi-seam: the graphable stages replayed, the others eager (what predict runs)
                runner = segmented_runner(stages, "on", model.net, f"{family}-{size} {dtype_name}")
                try:
                    parity = verify_segmented(runner, probe_a, probe_b)
                finally:
                    runner.release()
            else:
                parity = verify_parity(model.inference_forward, probe_a, probe_b, watch=model.net,
                                       name=f"{family}-{size} {dtype_name}")
        result[f"infer_{dtype_name}"] = {"ok": parity.ok, "summary": parity.summary()}
    del model
    torch.cuda.empty_cache()
    if skip_training:
        result["train_amp"] = {"ok": True, "not_applicable": skip_training, "summary": f"n/a: {skip_training}"}
        return result

    # compute_loss is the family's eager remainder; it reads no weights. A split-capture family's
    # training_head (network work after the captured seam) runs on this copy's network, the same
    # in every arm, so the arms compare the captured prefix (its gradients) and the loss.
    loss_owner = build()
    split = has_training_head(loss_owner.family)
    if split:
        loss_owner.net.to(device).train()
    targets = _to_device(loss_owner.family.sample_targets(train_batch, size_px, torch.Generator().manual_seed(7)),
                         device)
    context = LossContext(gains=loss_owner.spec.task(task).loss_gains, global_batch=train_batch)

    def make_model() -> torch.nn.Module:
        return build().training_module()

    def make_inputs() -> tuple[torch.Tensor, ...]:
        return (torch.rand(train_batch, 3, size_px, size_px),)

    def loss_fn(outputs: Any, inputs: Sequence[torch.Tensor]) -> torch.Tensor:  # noqa: ARG001 - the family's tree
        if split:
            outputs = loss_owner.family.training_head(loss_owner.net, outputs, targets)
        return loss_owner.family.compute_loss(outputs, targets, context).total

    step = compare_train_step(make_model, make_inputs, loss_fn, device=device, autocast_dtype=torch.float16)
    result["train_amp"] = {"ok": step.ok, "summary": step.summary(),
                           "grads": step.counts("grad"), "buffers": step.counts("buffer"),
                           "loss": step.counts("loss")}
    return result


def training_not_applicable(model: Any) -> str | None:
    """Why the training row does not apply to ``model``'s family and task, or None when it does:
    a pretrained-only task has no loss to step, and a multi-seam family keeps an uncapturable
    op inside its network, so training cannot be captured whole."""
    if not model.spec.task(model.task).loss_names:
        return "pretrained-only (no training here)"
    if model.family.inference_stages(model.net):
        return "an uncapturable op inside the network (inference runs split; training stays eager)"
    return None


def _run_child(family: str, size: str, task: str, args: argparse.Namespace,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", family, size, task, "--train-batch", str(args.train_batch)]
    if args.imgsz:
        cmd += ["--imgsz", str(args.imgsz)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:  # a row, not the run: the other rows still go ahead
        return {"family": family, "size": size, "task": task, "error": f"timed out after {args.timeout_s:g} s",
                "seconds": time.perf_counter() - started}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"family": family, "size": size, "task": task, "error": proc.stderr[-2000:] or "no result",
                "seconds": time.perf_counter() - started}
    data = json.loads(lines[-1][len("RESULT "):])
    data["seconds"] = time.perf_counter() - started
    return data


def _cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "not run"
    if entry.get("not_applicable"):
        return entry["summary"]
    text = entry["summary"].replace("\n", " ").replace("|", "/")
    for prefix in ("PASS: ", "FAIL "):  # inference summaries start with "<name>: PASS: ..."
        if prefix in text:
            text = text.split(prefix, 1)[1]
    return ("PASS" if entry["ok"] else "FAIL") + ": " + text


TABLE_HEADER = "| family | size | task | inference fp32 | inference fp16 | training (AMP) | verdict |"


def row_line(r: dict[str, Any]) -> str:
    """One table row of a certified (or failed) family x size x task."""
    if "error" in r:
        return (f"| {r['family']} | {r['size']} | {r['task']} | error | error | error | FAIL: "
                f"{r['error'].strip().splitlines()[-1] if r['error'].strip() else 'crashed'} |")
    infer_ok = r["infer_fp32"]["ok"] and r["infer_fp16"]["ok"]
    train_ok = r["train_amp"]["ok"]
    train_word = "n/a" if r["train_amp"].get("not_applicable") else "green" if train_ok else "red"
    verdict = ("green" if infer_ok and train_ok and train_word == "green" else
               f"inference {'green' if infer_ok else 'red'}, training {train_word}")
    return (f"| {r['family']} | {r['size']} | {r['task']} | {_cell(r['infer_fp32'])} | "
            f"{_cell(r['infer_fp16'])} | {_cell(r['train_amp'])} | {verdict} |")


def merge_rows(text: str, lines: list[str]) -> str | None:
    """``text`` (an existing parity page) with its table's rows of the same family, size and task
    replaced by ``lines`` and the others kept (new rows appended): a run of a few rows updates
    the page rather than dropping every row it did not run, and the page's prose stays. None
    when ``text`` has no table."""
    page = text.splitlines()
    if TABLE_HEADER not in page:
        return None
    first = page.index(TABLE_HEADER) + 2  # past the header and its |---| line
    last = first
    while last < len(page) and page[last].startswith("| "):
        last += 1

    def key(line: str) -> tuple[str, ...]:
        return tuple(cell.strip() for cell in line.strip("|").split("|")[:3])

    fresh = {key(line): line for line in lines}
    kept = [fresh.pop(key(line), line) for line in page[first:last]]
    return "\n".join(page[:first] + kept + list(fresh.values()) + page[last:]) + "\n"


def write_markdown(rows: list[dict[str, Any]], out: Path, command: str, *, gpu: str | None = None,
                   torch_version: str | None = None, date: str | None = None) -> None:
    """Write the table into ``out``: merged row by row into an existing page (``merge_rows``),
    else a new page (the numerics block of ``tools/numerics_classes.py`` kept either way)."""
    import torch

    lines = [row_line(r) for r in rows]
    merged = merge_rows(out.read_text(), lines) if out.is_file() else None
    if merged is not None:
        out.write_text(merged)
        return
    gpu = gpu or (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
    page = [
        "# CUDA graph parity matrix",
        "",
        f"Generated {date or dt.date.today().isoformat()} on {gpu}, torch {torch_version or torch.__version__}, "
        f"by `{command}`.",
        "",
        "Inference: the family's captured forward replayed on two contrasting probes (uniform [0,1) and",
        "3*N(0,1)+1) equals eager bit for bit, the probes give different outputs, and a replay never",
        "returns a stale result; batch 1. Training: one forward+backward under fp16 autocast at the given",
        "batch, graphed vs eager, with an eager-vs-eager control; counts of bit-identical tensors.",
        "",
        TABLE_HEADER,
        "|---|---|---|---|---|---|---|",
        *lines,
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = _numerics_block(out)
    out.write_text("\n".join(page) + "\n" + (f"\n{kept}\n" if kept else ""))


def _numerics_block(out: Path) -> str:
    """The training numerics classes block ``tools/numerics_classes.py`` wrote into ``out``, kept
    across a rewrite of the inference/step-0 table (empty when there is none)."""
    from numerics_classes import find_block  # this folder is on sys.path when run as a script

    text = out.read_text() if out.is_file() else ""
    found = find_block(text)
    return text[found[0]:found[1]] if found is not None else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=3, metavar=("FAMILY", "SIZE", "TASK"), help=argparse.SUPPRESS)
    parser.add_argument("--families", default=None, help="comma-separated (default: every registered family)")
    parser.add_argument("--sizes", default=None, help="comma-separated (default: every size of each family)")
    parser.add_argument("--rows", default=None,
                        help="exact rows instead: family:size[:task],... (e.g. yolo9:t,rtdetr:r18)")
    parser.add_argument("--imgsz", type=int, default=None, help="default: each family's own image size")
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--jobs", type=int, default=1,
                        help="rows certified at once (child processes sharing the GPU, each with a share of "
                             "the CPU threads); each row is written as it finishes")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "parity-matrix.md")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():  # every row would fail, and --out would be overwritten with them
        sys.exit("parity_matrix.py needs a CUDA GPU")
    if args.one:
        data = certify_one(args.one[0], args.one[1], args.one[2], args.imgsz, args.train_batch)
        print("RESULT " + json.dumps(data, default=str), flush=True)
        return 0
    from libreyolo_models.zoo.registry import families

    chosen = args.families.split(",") if args.families else sorted(families())
    rows = []
    jobs = [(family, size, task) for family in chosen for task in families()[family].tasks
            for size in (args.sizes.split(",") if args.sizes else families()[family].sizes_for(task))]
    if args.rows:
        parts = [row.split(":") for row in args.rows.split(",")]
        jobs = [(p[0], p[1], p[2] if len(p) > 2 else families()[p[0]].default_task) for p in parts]
    todo = [job for job in jobs if job[1] in families()[job[0]].sizes_for(job[2])]
    env = side_by_side_env(args.jobs)
    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    futures = []
    for family, size, task in todo:
        print(f"certifying {family}-{size} {task} ...", file=sys.stderr, flush=True)
        futures.append(pool.submit(_run_child, family, size, task, args, env))
    for future in as_completed(futures):
        row = future.result()
        rows.append(row)
        print(json.dumps({k: row.get(k) for k in ("family", "size", "seconds")}), file=sys.stderr, flush=True)
        for key in ("infer_fp32", "infer_fp16", "train_amp"):
            if key in row:
                print(f"  {key}: {row[key]['summary']}", file=sys.stderr, flush=True)
        if "error" in row:
            print(f"  ERROR: {row['error'][-800:]}", file=sys.stderr, flush=True)
        # after every row (merged, so rewriting is harmless): a run stopped early keeps what it measured
        write_markdown(rows, args.out, "python tools/parity_matrix.py")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1, default=str))
    pool.shutdown()
    print(args.out.read_text())
    return 0 if all("error" not in r and r["infer_fp32"]["ok"] and r["infer_fp16"]["ok"] and r["train_amp"]["ok"]
                    for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
