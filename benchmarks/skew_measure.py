"""The skew measure's cost and angles: ink coordinates turned (numpy, as the daemon does)
against the mask turned as an image for every candidate angle (Pillow, as it did before).

Each corpus image page (PDFs left out) is turned by each of ``--degrees`` counter-clockwise
on white (as ``cases.skewed`` does) and measured both ways, one thread; CPU time is the
process's, per page. The error is how far the angle found is from undoing the turn given
(a page the corpus holds slightly crooked adds its own skew to both ways alike).

    python benchmarks/skew_measure.py --corpus ../shared/corpus
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common
from ocrwatch.scan import deskew, inkcover

DEGREES = (-8.0, -5.0, -3.0, -2.0, -1.5, -1.2, 0.0, 1.2, 1.5, 2.0, 3.0, 5.0, 8.0)


def by_image(image: Image.Image) -> float:
    """The same measure with the mask turned by Pillow for every candidate angle (as it
    was before the coordinates): whole degrees at ``WORK_SIDE``, tenths at ``FINE_SIDE``."""
    mask = inkcover.ink_mask(image, deskew.WORK_SIDE)
    if mask.getbbox() is None:
        return 0.0
    coarse = [float(x) for x in range(-round(deskew.MAX_ANGLE), round(deskew.MAX_ANGLE) + 1)]
    sideways, scored = max(((n, {a: deskew._sharpness(way, a) for a in coarse})
                            for n, way in enumerate((mask,
                                                     mask.transpose(Image.Transpose.ROTATE_90)))),
                           key=lambda measured: max(measured[1].values()))
    best = max(scored, key=scored.__getitem__)
    if abs(best) + deskew.FINE_REACH < deskew.MIN_ANGLE:
        return 0.0
    finer = inkcover.ink_mask(image, deskew.FINE_SIDE)
    lines = finer.transpose(Image.Transpose.ROTATE_90) if sideways else finer
    tenths = round(deskew.FINE_REACH * 10)
    fine = {round(best + x / 10, 1): deskew._sharpness(lines, best + x / 10)
            for x in range(-tenths, tenths + 1)}
    straight = fine[0.0] if 0.0 in fine else deskew._sharpness(lines, 0.0)
    angle = max(fine, key=fine.__getitem__)
    if abs(angle) < deskew.MIN_ANGLE or fine[angle] < straight * deskew.GAIN:
        return 0.0
    return angle


def timed(measure: Callable[[Image.Image], float], image: Image.Image) -> tuple[float, float]:
    start = time.process_time()
    angle = measure(image)
    return angle, time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--degrees", type=float, nargs="+", default=list(DEGREES))
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    items = [item for item in _common.corpus(args.corpus) if item.path.suffix.lower() != ".pdf"]
    ways: dict[str, Callable[[Image.Image], float]] = {
        "coordinates": deskew.skew_angle, "image": by_image}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    error: dict[str, list[float]] = {name: [] for name in ways}
    apart: list[str] = []
    for item in items:
        with Image.open(item.path) as source:
            page = source.convert("L") if source.mode not in ("L", "RGB") else source.copy()
        white = 255 if page.mode == "L" else (255, 255, 255)
        for degrees in args.degrees:
            crooked = page.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True,
                                  fillcolor=white) if degrees else page
            found = {}
            for name, measure in ways.items():
                angle, seconds = timed(measure, crooked)
                cpu[name].append(seconds)
                error[name].append(abs(angle + degrees))
                found[name] = angle
            if abs(found["coordinates"] - found["image"]) > 0.15:
                apart.append(f"- {item.path.name} turned {degrees:+.1f}: coordinates "
                             f"{found['coordinates']:+.1f}, image {found['image']:+.1f}")
    n = len(cpu["image"])
    ms = {name: 1000 * _common.median(values) for name, values in cpu.items()}
    lines = _common.header(
        "The skew measure: ink coordinates turned (numpy) against the mask turned as an image",
        [f"pages: {len(items)} corpus images x {len(args.degrees)} turns = {n} measurements, "
         "one thread; CPU = process time per measurement",
         "error: |angle found + turn given| in degrees (0 expected on a straight page)"])
    lines += ["", "| way | CPU ms/page (median) | CPU total s | mean error (deg) |",
              "|---|--:|--:|--:|"]
    for name in ways:
        lines.append(f"| {name} | {ms[name]:.1f} | {sum(cpu[name]):.1f} | "
                     f"{sum(error[name]) / n:.3f} |")
    lines += ["", f"CPU ratio coordinates / image: {ms['coordinates'] / ms['image']:.3f}x "
              "(median per page)",
              f"angles more than 0.15 degrees apart: {len(apart)} of {n}", *apart]
    print("\n".join(lines))
    print(f"written: {_common.save('skew_measure.txt', lines, args.out)}")


if __name__ == "__main__":
    main()
