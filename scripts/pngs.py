"""PNG pictures for docs/img: a screenshot or a plot quantised to a palette, kept under a size (shared by
scripts/screenshots.py and scripts/dashboard_preview.py)."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

MAX_BYTES = 300_000


def save_png(png: bytes, path: Path, max_bytes: int = MAX_BYTES) -> None:
    """`png` quantised to at most 128 colours (text and flat plots lose nothing visible), under `max_bytes`."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    for colours in (128, 64, 32):
        out = io.BytesIO()
        image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(out, format="PNG", optimize=True)
        if out.tell() <= max_bytes:
            path.write_bytes(out.getvalue())
            print(f"{path}: {out.tell():,} bytes, {image.width}x{image.height}, {colours} colours")
            return
    raise SystemExit(f"{path}: over {max_bytes:,} bytes even at 32 colours")
