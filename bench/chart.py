"""A bar chart of the benchmark ratios as PNG (Pillow: no plotting stack needed)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from bench.harness import Result

_ROW, _LEFT, _WIDTH, _TOP = 26, 260, 900, 40


def draw(results: list[Result], path: Path) -> None:
    shown = [r for r in results if r.ref]  # counts (failures, hangs) have no ratio to draw
    height = _TOP + _ROW * len(shown) + 40
    image = Image.new("RGB", (_WIDTH, height), "white")
    pen = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    top = max([2.0, *(r.ratio for r in shown)])
    scale = (_WIDTH - _LEFT - 80) / top
    pen.text((10, 10), "pyscrun / reference (median ratio; line at 1.0)", fill="black", font=font)
    for i, result in enumerate(shown):
        y = _TOP + i * _ROW
        colour = {True: (60, 150, 80), False: (200, 70, 60), None: (90, 120, 200)}[result.met]
        pen.text((10, y + 5), result.name, fill="black", font=font)
        pen.rectangle((_LEFT, y + 4, _LEFT + result.ratio * scale, y + _ROW - 4), fill=colour)
        pen.text((_LEFT + result.ratio * scale + 6, y + 5), f"{result.ratio:.2f}", fill="black",
                 font=font)
    x = _LEFT + scale
    pen.line((x, _TOP - 4, x, height - 30), fill="black", width=1)
    pen.text((10, height - 24), "green: target met, red: missed, blue: no target", fill="black",
             font=font)
    image.save(path)
