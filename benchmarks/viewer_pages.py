"""What a viewer shows beside a PDF page's text layer: how many pages are read with it.

For every page of the PDFs given (default: ../shared/corpus), as the daemon prepares it
(``pdf_text = "auto"``, real Tesseract for what is drawn):

- ``layer``: its text layer taken, nothing drawn;
- ``layer + pictures``: its layer taken, its pictures (or a scan under a short layer)
  drawn without the text and read by Tesseract, merged with the layer;
- ``ocr``: drawn whole and read with OCR;

and how many pages end with a doubt (the original kept), with the reason. The time of
preparing and reading each kind of page is printed as medians, beside the plain
alternative for a ``layer + pictures`` page (its layer alone, nothing read).

    python benchmarks/viewer_pages.py ../shared/corpus
    python benchmarks/viewer_pages.py ../shared/corpus --made   # and the test PDFs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def made(folder: Path) -> list[Path]:
    """The PDFs of tests/reliability/viewer_files.py: words beside a layer, a logo..."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))
    import viewer_files as files  # type: ignore[import-not-found]

    return [
        files.filled_form(folder / "form.pdf", "Jane Q. Public", "Approved", "Call back"),
        files.text_with_a_picture(folder / "stamped.pdf", "REF 5531"),
        files.text_with_a_logo(folder / "logo.pdf"),
        files.short_heading(folder / "heading.pdf", "Minutes"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="*", type=Path,
                        default=[Path(__file__).resolve().parents[2] / "shared" / "corpus"])
    parser.add_argument("--made", action="store_true",
                        help="also the PDFs the tests build (a logo, a stamp, a form)")
    args = parser.parse_args()

    from ocrwatch.config import Config
    from ocrwatch.engines.registry import create
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.pipeline import read
    from ocrwatch.scan.prepare import ScanPrep

    config = Config(engine="tesseract", languages=["eng"], pdf_text="auto")
    engine = create(config, "tesseract")
    prep = ScanPrep(config)
    pdfs = sorted(p for folder in args.folders for p in folder.glob("*.pdf"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.made:
            pdfs += made(Path(tmp))
        kinds: Counter[str] = Counter()
        seconds: dict[str, list[float]] = {}
        doubts: list[str] = []
        try:
            for pdf in pdfs:
                started = time.perf_counter()
                pages = list(iter_pages(pdf, config, engine.max_side, text_layer=True))
                prepared = time.perf_counter() - started
                for page in pages:
                    start = time.perf_counter()
                    page = prep.prepare(page)
                    (result,), _ = read(engine, pdf.name, [page])
                    spent = time.perf_counter() - start + prepared / len(pages)
                    kind = ("layer" if page.text is not None and page.image.size == (1, 1)
                            else "layer + pictures" if page.known else "ocr")
                    kinds[kind] += 1
                    seconds.setdefault(kind, []).append(spent)
                    if result.keep_original:
                        doubts.append(f"{pdf.name} page {page.index + 1} ({kind}): "
                                      f"{result.keep_original}")
        finally:
            engine.close()
    total = sum(kinds.values())
    print(f"{len(pdfs)} PDFs, {total} pages, Tesseract {config.languages}, pdf_text = auto")
    for kind in ("layer", "layer + pictures", "ocr"):
        times = seconds.get(kind, [])
        median = f"{statistics.median(times):.2f} s median" if times else "-"
        print(f"  {kind:18} {kinds[kind]:4} pages  {median}")
    if seconds.get("layer + pictures") and seconds.get("layer"):
        ratio = statistics.median(seconds["layer + pictures"]) / statistics.median(
            seconds["layer"])
        print(f"  a page whose pictures are read costs {ratio:.0f}x its layer alone")
    print(f"  read with doubts (original kept): {len(doubts)} of {total} pages")
    for line in doubts:
        print(f"    {line}")


if __name__ == "__main__":
    main()
