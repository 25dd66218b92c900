"""What ``ocrwatch reread --outputs`` costs against reading the files, now that the index
keeps each page's layout (word boxes, migration 013).

Four files, seven pages (from ``../shared/corpus``: a 4-page PDF and three typewritten
scans; generated letters when the corpus is absent), read by the Tesseract engine.
Process CPU seconds (every thread of the process: Tesseract runs in it; no child
process is started with pdfa = "never") of:

- a full read writing md, txt, pdf, hocr and alto;
- after a read writing md and txt, ``reread --outputs`` adding pdf, hocr and alto
  (``Daemon.write_outputs``) with the layouts stored: no page read again;
- the same with the stored layouts removed, as every index made before migration 013 is
  (and as the code before it always did): Tesseract finds the word boxes again;
- ``reread --outputs`` adding only hocr and alto, layouts stored.

Each run ``--repeats`` times (default 3) in fresh folders; medians printed. Then the
hOCR and ALTO of the first full read against its searchable PDF, read back with
``pdftotext -bbox``: the words in the same order (difflib's matching blocks), and the
distance between each matched word's centres in points (hOCR pixels scaled by the PDF
page's width over the hOCR page's).

    python benchmarks/reread_outputs.py
    python benchmarks/reread_outputs.py --repeats 1 --out /tmp/r.txt
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, median, save

HERE = Path(__file__).resolve().parent.parent
CORPUS = HERE.parent / "shared" / "corpus"
FILES = ["ehri_eng_multipage_4p.pdf", "ehri_eng_03.jpg", "ehri_eng_04.jpg",
         "ehri_dan_00.jpg"]
ALL = ["md", "txt", "pdf", "hocr", "alto"]


def sources(folder: Path) -> tuple[list[Path], str]:
    """The files to read, copied to ``folder``; and where they came from."""
    folder.mkdir(parents=True, exist_ok=True)
    if all((CORPUS / f).exists() for f in FILES):
        for name in FILES:
            shutil.copy(CORPUS / name, folder / name)
        return [folder / f for f in FILES], "../shared/corpus: " + ", ".join(FILES)
    from benchmarks.pdf_output import DPI, page_lines, synthetic_page

    out = []
    for n in range(4):
        image, _ = synthetic_page(page_lines(n, 12))
        path = folder / f"letter{n}.png"
        image.save(path, dpi=(DPI, DPI))
        out.append(path)
    return out, "generated letters (benchmarks/pdf_output.synthetic_page), 4 pages"


def config_for(root: Path, outputs: list[str]) -> object:
    from ocrwatch import config as config_mod
    from ocrwatch.engines import registry  # noqa: F401  (the engines' names, for load)

    config = config_mod.load(None, environ={}, overrides={
        "inbox": [str(root / "inbox")], "database": str(root / "index.sqlite3"),
        "engine": "tesseract", "workers": "2", "pdfa": "never"})
    config.outputs = outputs
    return config


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def read(config: object, files: list[Path]) -> None:
    from ocrwatch.daemon import Daemon

    with Daemon(config, watch=False) as daemon:  # type: ignore[arg-type]
        daemon.add(files)
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            jobs = [daemon.jobs.known(p) for p in files]
            if all(j is not None and j.state.value in ("done", "failed") for j in jobs):
                break
            time.sleep(0.2)
        for p in files:
            job = daemon.jobs.known(p)
            assert job is not None and job.state.value == "done", (p, job)


def write_outputs(config: object) -> dict[str, int]:
    from ocrwatch.daemon import Daemon

    # As `ocrwatch reread --outputs` does with no daemon running: not started.
    daemon = Daemon(config, watch=False)  # type: ignore[arg-type]
    try:
        return daemon.write_outputs()
    finally:
        daemon.close()


def remove(folder: Path, suffixes: tuple[str, ...]) -> None:
    for path in folder.iterdir():
        if path.name.endswith(suffixes):
            path.unlink()


def one_round(tmp: Path) -> dict[str, float]:
    from ocrwatch.store.db import Database

    got: dict[str, float] = {}
    full = tmp / "full"
    files, _ = sources(full / "inbox")
    got["full read, md txt pdf hocr alto"] = cpu(lambda: read(config_for(full, ALL), files))

    later = tmp / "later"
    files, _ = sources(later / "inbox")
    read(config_for(later, ["md", "txt"]), files)
    inbox = later / "inbox"
    added = (".ocr.pdf", ".hocr", ".alto.xml")
    said: dict[str, int] = {}

    def run(outputs: list[str]) -> None:
        said.update(write_outputs(config_for(later, outputs)))

    got["reread --outputs hocr alto, layout stored"] = cpu(
        lambda: run(["md", "txt", "hocr", "alto"]))
    assert said["placed"] == 0, said
    remove(inbox, added)
    got["reread --outputs pdf hocr alto, layout stored"] = cpu(lambda: run(ALL))
    assert said["placed"] == 0 and said["outputs"] == 3 * len(files), said
    remove(inbox, added)
    db = Database(later / "index.sqlite3")
    try:
        with db.transaction() as conn:  # an index from before migration 013
            conn.execute("UPDATE pages SET layout = NULL")
    finally:
        db.close()
    got["reread --outputs pdf hocr alto, no layout stored (before)"] = cpu(lambda: run(ALL))
    assert said["placed"] > 0, said
    return got


def _centre(box: tuple[float, ...]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def compare_with_pdf(folder: Path) -> list[str]:
    """hOCR and ALTO words of each file in ``folder`` against its PDF's text layer."""
    import difflib
    import re
    import subprocess
    import xml.etree.ElementTree as ET
    from html import unescape

    same_alto = True
    words = matched = 0
    offsets: list[float] = []
    lefts: list[float] = []  # the left edges: where each word starts on the page
    for hocr in sorted(folder.glob("*.hocr")):
        stem = hocr.name[:-len(".hocr")]
        root = ET.parse(hocr).getroot()
        alto = ET.parse(folder / f"{stem}.alto.xml").getroot()
        strings = [(s.get("CONTENT"), tuple(int(s.get(k) or 0) for k in
                                            ("HPOS", "VPOS", "WIDTH", "HEIGHT")))
                   for s in alto.iter() if s.tag.endswith("}String")]
        out = subprocess.run(["pdftotext", "-bbox", str(folder / f"{stem}.ocr.pdf"), "-"],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        pdf_pages = re.findall(r'<page width="([\d.]+)" height="[\d.]+">(.*?)</page>', out,
                               re.S)
        hocr_pages = [e for e in root.iter() if e.get("class") == "ocr_page"]
        at = 0
        for page, (width, body) in zip(hocr_pages, pdf_pages, strict=True):
            page_width = int((page.get("title") or "").split("bbox ")[1].split()[2])
            scale = float(width) / page_width
            mine = []
            for e in page.iter():
                if e.get("class") == "ocrx_word":
                    box = (e.get("title") or "").split("bbox ")[1].split(";")[0].split()
                    mine.append((e.text or "", tuple(int(v) * scale for v in box)))
            for text, (x, y, w, h) in strings[at:at + len(mine)]:
                same_alto &= (text, (x * scale, y * scale, (x + w) * scale,
                                     (y + h) * scale)) in mine
            at += len(mine)
            theirs = [(unescape(t), (float(a), float(b), float(c), float(d))) for a, b, c, d, t
                      in re.findall(r'<word xMin="([\d.]+)" yMin="([\d.]+)" '
                                    r'xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>', body)]
            words += len(mine)
            match = difflib.SequenceMatcher(None, [t for t, _ in mine], [t for t, _ in theirs],
                                            autojunk=False)
            for block in match.get_matching_blocks():
                for k in range(block.size):
                    (ax, ay), (bx, by) = (_centre(mine[block.a + k][1]),
                                          _centre(theirs[block.b + k][1]))
                    offsets.append(((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5)
                    lefts.append(abs(mine[block.a + k][1][0] - theirs[block.b + k][1][0]))
                    matched += 1
    offsets.sort()
    lefts.sort()
    return [
        "",
        "hOCR and ALTO against the searchable PDF's text layer (pdftotext -bbox), first "
        "full read:",
        f"  ALTO's words and boxes the same as hOCR's: {'yes' if same_alto else 'NO'}",
        f"  hOCR words {words}, found in the PDF's layer in the same order {matched} "
        f"({matched / max(words, 1):.1%})",
        f"  centre distance of those words, points: median {median(offsets):.2f}, "
        f"95th percentile {offsets[int(0.95 * (len(offsets) - 1))]:.2f}, "
        f"max {offsets[-1]:.2f}" if offsets else "  no words matched",
        f"  left edges of those words, points: median {median(lefts):.2f}, 95th percentile "
        f"{lefts[int(0.95 * (len(lefts) - 1))]:.2f}, max {lefts[-1]:.2f}" if lefts else "",
        "  (the PDF's layer stretches a word to reach towards the next one and sets each "
        "line on one baseline at one size, so its boxes are wider and taller than the ink's)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="reread-outputs-") as name:
        _, where = sources(Path(name) / "probe")
        for n in range(args.repeats):
            rounds.append(one_round(Path(name) / f"round{n}"))
        against_pdf = compare_with_pdf(Path(name) / "round0" / "full" / "inbox")
    lines = header("reread --outputs against a full read (process CPU seconds)",
                   [f"files: {where}", "engine: tesseract (default languages), workers 2, "
                    "pdfa never", f"repeats: {args.repeats}, medians"])
    full = median([r["full read, md txt pdf hocr alto"] for r in rounds])
    lines.append(f"{'':60} {'CPU s':>7} {'of full':>8}")
    for key in rounds[0]:
        value = median([r[key] for r in rounds])
        lines.append(f"{key:60} {value:7.2f} {value / full:8.3f}x")
    lines += against_pdf
    print("\n".join(lines))
    print(f"saved to {save('reread_outputs.txt', lines, args.out)}")


if __name__ == "__main__":
    main()
