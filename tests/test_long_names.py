"""Names near the file system's limit: with "pdf" in outputs, ``STEM.ocr.pdf`` of a
250-byte name is longer than 255 bytes. An output name that would pass the limit is
shortened (its start, ``~`` and a hash of the whole), unique, and the sidecars are still
found by ``reindex --from-sidecars``. Before, the whole file failed, with a hint ("set
output_dir") that could not help.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pikepdf
import pytest
from helpers import make_config, wait_for, write_image

from ocrwatch.daemon import Daemon
from ocrwatch.reindex import from_sidecars
from ocrwatch.results.sidecar import NAME_MAX, fitting, pdf_path
from ocrwatch.store.db import Database

pytestmark = pytest.mark.skipif(shutil.which("tesseract") is None,
                                reason="the PDF output places words with Tesseract")

PREFIX = "Rechnung-" + "x" * 232  # 241 bytes; with ".scan.png", 250


def _names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_250_byte_name_gets_all_its_outputs(tmp_path: Path) -> None:
    config = make_config(tmp_path, outputs=["md", "txt", "pdf"], pdfa="never")
    inbox = config.inbox[0]
    inbox.mkdir()
    png = write_image(inbox / f"{PREFIX}.scan.png", ["A page with a very long name"])
    # The same start and the same stem: its outputs must not take the first one's names.
    jpg = write_image(inbox / f"{PREFIX}.scan.jpg", ["Another page, another name"],
                      format="JPEG")
    pdf = inbox / f"{PREFIX}.copy.pdf"
    pdf.write_bytes(png.read_bytes())  # replaced below by a real PDF
    write_image(pdf, ["A PDF page with a long name"], format="PDF")
    originals = (png, jpg, pdf)
    assert all(len(os.fsencode(p.name)) == 250 for p in originals)

    with Daemon(config) as daemon:
        def finished() -> bool:
            jobs = [daemon.jobs.known(p) for p in originals]
            return all(j is not None and j.state.value in ("done", "failed") for j in jobs)

        wait_for(finished, 120, "the long-named files to be read")
        for p in originals:
            job = daemon.jobs.known(p)
            assert job is not None and job.state.value == "done", (p.name[-20:], job)
            (row,) = daemon.db.query("SELECT md_path, txt_path FROM jobs WHERE id = ?",
                                     (job.id,))
            md, txt = (Path(os.fsdecode(row[k])) for k in ("md_path", "txt_path"))
            pdf_out = pdf_path(md.with_suffix(""))
            for out in (md, txt, pdf_out):
                assert out.is_file(), out.name
                assert len(os.fsencode(out.name)) <= NAME_MAX
                assert out.name.startswith(PREFIX[:200])  # recognisable
            with pikepdf.open(pdf_out) as made:
                assert len(made.pages) == 1
            assert "fake text" in txt.read_text()
        outputs = [n for n in _names(inbox) if n.endswith((".md", ".txt", ".ocr.pdf"))]
        assert len(outputs) == 9 and len(set(outputs)) == 9, outputs

    # ocrwatch recognises its shortened names: the index comes back from the sidecars.
    (tmp_path / "index.sqlite3").unlink()
    for extra in tmp_path.glob("index.sqlite3-*"):
        extra.unlink()
    db = Database(config.database)
    try:
        restored = from_sidecars(config, db)
    finally:
        db.close()
    assert restored.files == 3 and not restored.without_sidecars, restored


def test_a_shortened_name_keeps_whole_characters_and_stays_unique(tmp_path: Path) -> None:
    long = "ü" * 200  # 400 bytes
    short = fitting(long)
    assert len(os.fsencode(short + ".txt")) <= NAME_MAX
    assert short.startswith("ü" * 100) and "\ufffd" not in short
    assert fitting(long + "a") != short
    assert fitting("scan") == "scan"
    # The PDF's name is shortened on its own, only when it would not fit.
    stem = tmp_path / ("x" * 248)
    assert len(os.fsencode(pdf_path(stem).name)) <= NAME_MAX
    assert pdf_path(stem).name.startswith("x" * 234 + "~")
    assert pdf_path(tmp_path / "scan") == tmp_path / "scan.ocr.pdf"
