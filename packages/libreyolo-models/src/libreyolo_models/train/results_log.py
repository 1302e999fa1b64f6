"""``results.csv`` (one row per epoch, rewritten atomically) and its loss/metric curves as PNG."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Mapping
from pathlib import Path

from ..atomic_write import atomic_write

log = logging.getLogger(__name__)


class ResultsLog:
    """Epoch rows kept in memory and written whole each time (a crash never leaves half a row)."""

    def __init__(self, path: Path, rows: list[dict[str, float]] | None = None) -> None:
        self.path = path
        self.rows: list[dict[str, float]] = list(rows or [])

    @classmethod
    def read(cls, path: Path) -> ResultsLog:
        if not path.is_file():
            return cls(path)
        with path.open(newline="") as fh:
            rows = [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(fh)]
        return cls(path, rows)

    def append(self, row: Mapping[str, float]) -> None:
        self.rows = [r for r in self.rows if r.get("epoch") != row.get("epoch")] + [dict(row)]
        self.write()

    def write(self) -> None:
        columns: list[str] = []
        for row in self.rows:
            columns += [k for k in row if k not in columns]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns)
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
        data = buf.getvalue().encode()
        atomic_write(self.path, lambda fh: fh.write(data))

    def plot(self, out: Path) -> Path | None:
        """Loss and metric curves per epoch, when matplotlib is installed (else nothing, logged once)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log.info("matplotlib is not installed: skipping %s (pip install matplotlib for plots)", out.name)
            return None
        if not self.rows:
            return None
        keys = [k for k in self.rows[-1] if k != "epoch" and not k.startswith("lr/")]
        cols = 4
        rows = (len(keys) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
        epochs = [r["epoch"] for r in self.rows]
        for ax, key in zip(axes.flat, keys):
            ax.plot(epochs, [r.get(key, float("nan")) for r in self.rows], marker=".")
            ax.set_title(key, fontsize=9)
            ax.set_xlabel("epoch", fontsize=8)
        for ax in list(axes.flat)[len(keys):]:
            ax.axis("off")
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out
