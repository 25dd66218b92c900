"""How the remote engine should encode a page: time and bytes of each lossless encoding.

    python3 benchmarks/remote_encode.py ../shared/corpus [--repeat 3]

Every page of the corpus is prepared as the daemon prepares it for LightOnOCR-2-1B
(``pages.iter_pages``: decoded, EXIF-rotated, scaled to 1540 px on its longest side),
then encoded by each candidate; the figures are medians over pages (each page's time
the best of ``--repeat``) of: encoding, base64 and the JSON body (the client's work),
decoding (what the server's image loader does with it), and the bytes on the wire.
Every encoding is checked lossless (decoded pixels equal to the page's). The report
goes to benchmarks/results/remote_encode.txt.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

from benchmarks._common import header, save  # noqa: E402
from ocrwatch.config import Config  # noqa: E402
from ocrwatch.engines import profiles  # noqa: E402
from ocrwatch.pages.decode import iter_pages  # noqa: E402

MAX_SIDE = profiles.get(profiles.DEFAULT).max_side  # the model engines' longest side

CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    "PNG, compress_level 0": ("PNG", {"compress_level": 0}),
    "PNG, compress_level 1 (before)": ("PNG", {"compress_level": 1}),
    "PNG, compress_level 3": ("PNG", {"compress_level": 3}),
    "PNG, compress_level 6 (Pillow's default)": ("PNG", {"compress_level": 6}),
    "WebP lossless, method 0": ("WEBP", {"lossless": True, "method": 0, "quality": 0}),
    "WebP lossless, method 4": ("WEBP", {"lossless": True, "method": 4, "quality": 50}),
}


def best(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="folder of scans (../shared/corpus)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = Config()
    pages = []
    for path in sorted(args.corpus.iterdir()):
        if path.suffix.lower() in (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".pdf"):
            pages += [p.image for p in iter_pages(path, config, MAX_SIDE)
                      if p.text is None]
    figures: dict[str, dict[str, list[float]]] = {}
    for name, (fmt, options) in CANDIDATES.items():
        f = figures.setdefault(name, {"encode": [], "wire": [], "decode": [], "bytes": []})
        for image in pages:
            def encode(image: Image.Image = image, fmt: str = fmt,
                       options: dict[str, Any] = options) -> bytes:
                buffer = io.BytesIO()
                image.save(buffer, format=fmt, **options)
                return buffer.getvalue()

            seconds, data = best(encode, args.repeat)

            def wire(data: bytes = data, fmt: str = fmt) -> bytes:
                url = f"data:image/{fmt.lower()};base64," + base64.b64encode(data).decode()
                return json.dumps({"messages": [{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": url}}]}]}).encode()

            wire_s, body = best(wire, args.repeat)

            def decode(data: bytes = data) -> Image.Image:
                with Image.open(io.BytesIO(data)) as opened:
                    return opened.convert("RGB")

            decode_s, back = best(decode, args.repeat)
            assert back.tobytes() == image.convert("RGB").tobytes(), f"{name} is lossy"
            f["encode"].append(seconds * 1000)
            f["wire"].append(wire_s * 1000)
            f["decode"].append(decode_s * 1000)
            f["bytes"].append(len(body) / 1024)
    before = statistics.median(figures["PNG, compress_level 1 (before)"]["encode"]) + \
        statistics.median(figures["PNG, compress_level 1 (before)"]["wire"])
    lines = [*header("Lossless page encodings for the remote engine "
                     "(benchmarks/remote_encode.py)", [
        f"pages: {len(pages)} pages of {args.corpus.name} prepared as the daemon does "
        f"(longest side {MAX_SIDE} px); medians over pages, each the best of {args.repeat}",
        "client = encode + base64 + JSON body; server decode = PIL open + convert to RGB",
    ]), "",
        "| encoding | encode ms | base64+JSON ms | client ms | vs PNG 1 | server decode ms "
        "| body KiB |",
        "|---|---|---|---|---|---|---|"]
    for name, f in figures.items():
        enc, wire_ms = statistics.median(f["encode"]), statistics.median(f["wire"])
        lines.append(f"| {name} | {enc:.1f} | {wire_ms:.1f} | {enc + wire_ms:.1f} | "
                     f"{(enc + wire_ms) / before:.2f}x | {statistics.median(f['decode']):.1f} "
                     f"| {statistics.median(f['bytes']):.0f} |")
    lines.append("")
    lines.append("Every encoding decoded back to the page's exact pixels.")
    target = save("remote_encode.txt", lines, args.out)
    print("\n".join(lines))
    print(f"written to {target}")


if __name__ == "__main__":
    main()
