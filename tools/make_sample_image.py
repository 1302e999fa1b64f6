"""Write the bundled sample picture (``SAMPLE_IMAGE``) from ``shapes.render_sample``.

    uv run python tools/make_sample_image.py            # rewrite the asset
    uv run python tools/make_sample_image.py --check    # exit 1 if the asset no longer matches

The picture is generated, not drawn by hand, so it stays in the distribution the quick-start model
learns (see ``render_sample``'s docstring for why that matters). Re-run this after changing the
generator, then re-run the quick-start test (tests-integration/test_quickstart_demo.py).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from PIL import Image

from libreyolo_models import SAMPLE_IMAGE
from libreyolo_models.data.shapes import render_sample

JPEG_QUALITY = 90
MAX_MEAN_ABS_DIFF = 6.0  # JPEG noise on the grain; a changed generator differs by tens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    pixels, _ = render_sample()
    if args.check:
        current = np.asarray(Image.open(SAMPLE_IMAGE).convert("RGB"), dtype=np.int16)
        diff = float(np.abs(current - pixels.astype(np.int16)).mean()) if current.shape == pixels.shape else 255.0
        print(f"{SAMPLE_IMAGE}: mean abs difference {diff:.2f} (limit {MAX_MEAN_ABS_DIFF})")
        return 0 if diff <= MAX_MEAN_ABS_DIFF else 1
    Image.fromarray(pixels).save(SAMPLE_IMAGE, "JPEG", quality=JPEG_QUALITY)
    print(f"wrote {SAMPLE_IMAGE} ({pixels.shape[1]}x{pixels.shape[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
