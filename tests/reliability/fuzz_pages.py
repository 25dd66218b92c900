"""Fuzz the page loader: mutated images and PDFs through ``iter_pages``.

Run by ``test_fuzz.py`` in a child process with a memory limit, or by hand:

    python tests/reliability/fuzz_pages.py REPORT.json CASES SEED

Each case must end in pages or in InputError/TransientError (a reason for the user);
anything else is a finding. The report holds the findings, the slowest case and the
peak memory; ``progress`` in the report's folder names the case being run, so a hang
or a hard crash can be traced to its input (kept as ``case-N.bin``).
"""

from __future__ import annotations

import io
import json
import random
import resource
import sys
import time
import traceback
from pathlib import Path


def _seeds() -> dict[str, bytes]:
    import pypdf
    from PIL import Image, ImageDraw

    def page(text: str, size: tuple[int, int] = (320, 240)) -> Image.Image:
        image = Image.new("RGB", size, "white")
        ImageDraw.Draw(image).text((10, 10), text, fill="black")
        return image

    out: dict[str, bytes] = {}
    for fmt, ext, mode in (("PNG", "png", "RGB"), ("JPEG", "jpg", "RGB"), ("BMP", "bmp", "RGB"),
                           ("WEBP", "webp", "RGB"), ("TIFF", "tif", "RGB"),
                           ("PNG", "png", "P"), ("PNG", "png", "I;16")):
        buf = io.BytesIO()
        page(f"{fmt} {mode}").convert(mode).save(buf, format=fmt)
        out[f"{fmt.lower()}-{mode}.{ext}"] = buf.getvalue()
    buf = io.BytesIO()
    frames = [page(f"frame {i}") for i in range(3)]
    frames[0].save(buf, format="TIFF", save_all=True, append_images=frames[1:],
                   compression="tiff_lzw")
    out["multi.tif"] = buf.getvalue()
    buf = io.BytesIO()
    frames[0].save(buf, format="PDF", save_all=True, append_images=frames[1:])
    out["pillow.pdf"] = buf.getvalue()
    writer = pypdf.PdfWriter()
    for _ in range(2):
        writer.add_blank_page(200, 300)
    buf = io.BytesIO()
    writer.write(buf)
    out["pypdf.pdf"] = buf.getvalue()
    return out


INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff", b"\x00\x00\x00\x00",
               b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x00\x01\x00\x00", b"9999999999",
               b"-1", b"0", b" obj", b"endobj", b"stream", b"/Count 99999999"]


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf)) if buf else 0
        if op == 0 and buf:  # flip bits
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1:  # overwrite with an interesting value (header fields live early)
            pos = min(pos, rng.randrange(64)) if rng.random() < 0.5 else pos
            value = rng.choice(INTERESTING)
            buf[pos:pos + len(value)] = value
        elif op == 2 and buf:  # truncate
            del buf[rng.randrange(len(buf)):]
        elif op == 3 and buf:  # duplicate a chunk
            end = min(len(buf), pos + rng.randint(1, 4096))
            buf[pos:pos] = buf[pos:end]
        elif op == 4 and buf:  # delete a chunk
            del buf[pos:pos + rng.randint(1, 512)]
        else:  # insert random bytes
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(buf)


def main(report: Path, cases: int, seed: int) -> int:
    import warnings

    warnings.simplefilter("ignore")  # Pillow warns on every odd tag; the outcome is what counts
    from ocrwatch.config import Config
    from ocrwatch.core.errors import InputError, TransientError
    from ocrwatch.pages.decode import iter_pages

    config = Config(max_pixels=40_000_000, max_pages=100, pdf_dpi=150)
    seeds = _seeds()
    names = sorted(seeds)
    rng = random.Random(seed)
    work = report.parent
    findings: list[dict[str, object]] = []
    slowest = (0.0, "")
    outcomes = {"pages": 0, "refused": 0}
    for n in range(cases):
        name = rng.choice(names)
        data = mutate(seeds[name], rng)
        path = work / f"case-{n}{Path(name).suffix}"
        path.write_bytes(data)
        (work / "progress").write_text(f"{n} {name} {path}\n")
        start = time.monotonic()
        try:
            for page in iter_pages(path, config, 1540):
                assert page.image.mode == "RGB" and max(page.image.size) <= 1540
            outcomes["pages"] += 1
        except (InputError, TransientError) as exc:
            outcomes["refused"] += 1
            if not str(exc) or "Traceback" in str(exc):
                findings.append({"case": n, "seed": name, "error": f"unclear reason: {exc!r}"})
        except BaseException as exc:  # a finding: no plain reason for the user
            findings.append({"case": n, "seed": name, "file": str(path),
                             "error": "".join(traceback.format_exception_only(exc)).strip()})
            continue  # keep the file for a reproduction
        took = time.monotonic() - start
        if took > slowest[0]:
            slowest = (took, f"case {n} from {name}")
        path.unlink()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report.write_text(json.dumps({"cases": cases, "seed": seed, "findings": findings,
                                  "slowest_s": round(slowest[0], 3), "slowest": slowest[1],
                                  "peak_rss_mb": round(peak_mb), **outcomes}, indent=2))
    return 0


if __name__ == "__main__":
    limit = int(float(sys.argv[4]) * 1024**3) if len(sys.argv) > 4 else 0
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
