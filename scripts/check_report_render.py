#!/usr/bin/env python3
"""Render a clinjudge report.html in headless Chromium and check the screenshot is not blank.

Usage: python scripts/check_report_render.py REPORT_HTML [--png OUT.png] [--chromium PATH]

Chromium runs with networking in the background switched off; the report is self-contained, so
nothing needs fetching. The PNG is decoded here (zlib only, no imaging library) and counted as
blank when nearly all pixels share one colour. Exit status: 0 rendered and not blank, 1 blank or
failed to render, 2 bad arguments or no Chromium.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections import Counter
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium(explicit: str | None = None) -> str | None:
    """Path of a Chromium binary, or None."""
    if explicit:
        return explicit if Path(explicit).exists() or shutil.which(explicit) else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def screenshot(chromium: str, html: Path, png: Path, size: str = "1280,2400") -> None:
    """Render ``html`` to ``png`` with headless Chromium."""
    with tempfile.TemporaryDirectory(prefix="clinjudge-chromium-") as profile:
        command = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={size}",
            f"--screenshot={png}",
            html.resolve().as_uri(),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if not png.is_file():
        raise RuntimeError(
            f"chromium wrote no screenshot (exit {result.returncode}): {result.stderr[-2000:]}"
        )


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, bytes per pixel and unfiltered rows of an 8-bit RGB/RGBA/grey PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat = 8, bytearray()
    width = height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        chunk = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
            if depth != 8 or channels is None or interlace:
                raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour})")
            bpp = channels
        elif kind == b"IDAT":
            idat.extend(chunk)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        line = bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            upleft = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(left, up, upleft)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, bpp, rows


def ink_share(png: Path, step: int = 4) -> tuple[float, int]:
    """Share of sampled pixels that differ from the most common colour, and colours seen."""
    width, height, bpp, rows = decode_png(png.read_bytes())
    colours: Counter[bytes] = Counter()
    for y in range(0, height, step):
        row = rows[y]
        for x in range(0, width, step):
            colours[row[x * bpp : x * bpp + min(bpp, 3)]] += 1
    total = sum(colours.values())
    if not total:
        return 0.0, 0
    _, background = colours.most_common(1)[0]
    return 1.0 - background / total, len(colours)


def check(html: Path, png: Path, chromium: str, min_ink: float = 0.01) -> str:
    """Render and check; returns a one-line verdict or raises ``RuntimeError``."""
    screenshot(chromium, html, png)
    ink, colours = ink_share(png)
    verdict = f"{png}: {ink:.1%} of sampled pixels are not background, {colours} colours"
    if ink < min_ink or colours < 3:
        raise RuntimeError(f"blank render: {verdict}")
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("html", type=Path, help="report.html to render")
    parser.add_argument("--png", type=Path, help="screenshot path (default: next to the HTML)")
    parser.add_argument("--chromium", help="Chromium binary (default: search PATH)")
    parser.add_argument("--min-ink", type=float, default=0.01, help="minimum non-background share")
    args = parser.parse_args(argv)
    if not args.html.is_file():
        print(f"error: {args.html}: no such file", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("error: no Chromium found (install chromium or pass --chromium)", file=sys.stderr)
        return 2
    png = args.png or args.html.with_suffix(".png")
    try:
        print(check(args.html, png, chromium, args.min_ink))
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
