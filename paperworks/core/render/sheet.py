"""Contact sheets: rows of images, each row with a wrapped caption and per-image borders."""
from __future__ import annotations

import textwrap
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def contact_sheet(
    rows: Sequence[Sequence[np.ndarray]],
    captions: Sequence[str],
    borders: Sequence[Sequence[tuple[int, int, int] | None]] | None = None,
    labels: Sequence[Sequence[str]] | None = None,
    scale: int = 2,
    caption_width: int = 300,
    pad: int = 4,
) -> Image.Image:
    """One PIL image: per row, a caption block on the left then the row's images (upscaled ``scale``×).

    ``borders[r][i]`` draws a coloured frame around image i of row r (e.g. green = target);
    ``labels[r][i]`` writes a short tag under it.
    """
    font = ImageFont.load_default()
    tile_h = max(img.shape[0] for row in rows for img in row) * scale
    tile_w = max(img.shape[1] for row in rows for img in row) * scale
    n_cols = max(len(r) for r in rows)
    row_h = max(tile_h + 14, 12 * 8) + pad
    sheet = Image.new("RGB", (caption_width + n_cols * (tile_w + pad) + pad, len(rows) * row_h + pad), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    chars = max(20, caption_width // 6)
    for r, (row, cap) in enumerate(zip(rows, captions)):
        y = pad + r * row_h
        lines = textwrap.wrap(cap, chars)[: max(1, row_h // 11)]
        for i, line in enumerate(lines):
            draw.text((pad, y + i * 11), line, fill=(0, 0, 0), font=font)
        for c, img in enumerate(row):
            x = caption_width + c * (tile_w + pad)
            tile = Image.fromarray(img).resize((img.shape[1] * scale, img.shape[0] * scale), Image.Resampling.NEAREST)
            sheet.paste(tile, (x, y))
            colour = borders[r][c] if borders is not None else None
            if colour is not None:
                draw.rectangle([x - 2, y - 2, x + tile.width + 1, y + tile.height + 1], outline=colour, width=2)
            if labels is not None and labels[r][c]:
                draw.text((x, y + tile.height + 2), labels[r][c], fill=(0, 0, 0), font=font)
    return sheet
