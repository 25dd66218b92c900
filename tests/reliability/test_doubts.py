"""A reading that may not be whole keeps its original, says why, and shows it.

Every engine and every input ends in one verdict per file: read whole, or read with
doubts. A doubt keeps the original whatever ``on_success`` says (``retire_reason``
names it), is counted and listed by ``ocrwatch status``, and the file's pages stay
searchable. Real HTTP on 127.0.0.1 for the remote engine (``tests/fake_openai.py``),
real Tesseract, a real SQLite index, a real inbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeServer
from PIL import Image, ImageDraw
from test_remote_daemon import coloured_page, hexa

from ocrwatch.config import Config
from ocrwatch.core.status import format_status

from .helpers import image_bytes, wait_for

# (what the server answers, its finish_reason): none of them is a whole reading.
NOT_WHOLE: dict[str, tuple[str, str]] = {
    "cut_off": ("# Invoice 4711\n\nItem one, item two, item thr", "length"),
    "filtered": ("# Invoice 4711\n\nDear", "content_filter"),
    "zero_width": ("\u200b\u200b\u2060\ufeff\u200b", "stop"),
    "image_only": ("![image](image_1.png)", "stop"),
    "empty_fence": ("```\n```", "stop"),
    "rule": ("---", "stop"),
    "comment": ("<!-- page -->", "stop"),
    "lone_dot": (".", "stop"),
    "refusal": ("I'm sorry, but I can't help with that.", "stop"),
}
WHY = {
    "cut_off": "ran out of tokens",
    "filtered": "content filter",
    "zero_width": "answer for this page was empty",
    "image_only": "only markup",
    "empty_fence": "only markup",
    "rule": "only markup",
    "comment": "only markup",
    "lone_dot": "no words",
    "refusal": "declined to read the page",
}


@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_remote_answers_that_are_not_a_whole_reading_keep_the_original(
        tmp_path: Path, on_success: str) -> None:
    """The remote engine against a real OpenAI-compatible server on 127.0.0.1: a page cut
    off at max_tokens, withheld by a content filter, only zero-width characters, only
    markup, a lone ``.``, a refusal: each file is done (its text indexed) but read with
    doubts: the original stays, the reason is recorded and ``status`` lists it. A good
    page beside them still goes."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    archive = tmp_path / "archive"
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="remote", on_success=on_success, archive_dir=archive)
    from ocrwatch.daemon import Daemon

    with FakeServer() as server:
        config.remote.urls = [server.url]
        files: dict[str, Path] = {}
        for k, name in enumerate([*NOT_WHOLE, "good"]):
            c = (30, 90, k)
            if name in NOT_WHOLE:
                server.scripted[hexa(c)] = NOT_WHOLE[name]
            files[name] = inbox / f"{name}.png"
            coloured_page(c).save(files[name])
        data = {name: path.read_bytes() for name, path in files.items()}
        with Daemon(config) as daemon:
            wait_for(lambda: daemon.jobs.counts()["done"] == len(files) and daemon.is_idle(),
                     90, "every file read")
            rows = {Path(r["display"]).stem: dict(r)
                    for r in daemon.db.query("SELECT * FROM jobs")}
            status = daemon.status()
    for name in NOT_WHOLE:
        row = rows[name]
        assert files[name].read_bytes() == data[name], f"{name}: the original went: {row}"
        assert row["state"] == "done" and row["retire"] == "kept", row
        assert WHY[name] in row["retire_reason"], (name, row["retire_reason"])
    assert not files["good"].exists(), "a whole reading's original stays"
    assert rows["good"]["retire"] is None, rows["good"]
    # Status counts and lists the files read with doubts, with their reasons.
    assert status.doubted == len(NOT_WHOLE), status
    text = format_status(status)
    assert f"{len(files)} done ({len(NOT_WHOLE)} read with doubts)" in text, text
    listed = {Path(d.path).stem for d in status.doubts}
    assert listed <= set(NOT_WHOLE) and len(listed) == min(len(NOT_WHOLE), 10), listed
    as_json: Any = status.to_dict()
    assert as_json["doubted"] == len(NOT_WHOLE)
    assert all(WHY[Path(d["path"]).stem] in d["reason"] for d in as_json["doubts"])


def _picture(kind: str) -> Image.Image:
    """A page with marks that hold no words: a black disc (Tesseract reads nothing) or
    hatching (read as a few marks that are mostly not words)."""
    image = Image.new("RGB", (1240, 1754), "white")
    draw = ImageDraw.Draw(image)
    if kind == "disc":
        draw.ellipse((300, 400, 900, 1000), fill=(0, 0, 0))
    else:
        for x in range(0, 1200, 40):
            draw.line((x, 300, x + 300, 1500), fill=(0, 0, 0), width=6)
    return image


@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_tesseract_readings_that_are_not_whole_keep_the_original(
        tmp_path: Path, on_success: str) -> None:
    """Real Tesseract: a page it reads as nothing though it is not blank, and a page
    read as mostly not words, are done but read with doubts (before: done with a
    warning only in the index row, and the original deleted). A letter beside them
    still goes."""
    from ocrwatch.daemon import Daemon

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="tesseract", on_success=on_success,
                    archive_dir=tmp_path / "archive",
                    # The hatching as drawn (straightened, its lines read as a few letters).
                    deskew=False, rotate_pages=False)
    files = {"disc": inbox / "disc.png", "hatch": inbox / "hatch.png",
             "letter": inbox / "letter.png"}
    _picture("disc").save(files["disc"], dpi=(150, 150))
    _picture("hatch").save(files["hatch"], dpi=(150, 150))
    files["letter"].write_bytes(image_bytes("Dear Sir, thank you for the invoice",
                                            size=(1200, 400)))
    data = {name: path.read_bytes() for name, path in files.items()}
    with Daemon(config) as daemon:
        wait_for(lambda: daemon.jobs.counts()["done"] == 3 and daemon.is_idle(), 120,
                 "every file read")
        rows = {Path(r["display"]).stem: dict(r)
                for r in daemon.db.query("SELECT * FROM jobs")}
        status = daemon.status()
    for name, why in (("disc", "answer was empty"), ("hatch", "mostly not words")):
        assert files[name].read_bytes() == data[name], f"{name}: the original went"
        assert rows[name]["retire"] == "kept" and why in rows[name]["retire_reason"], \
            rows[name]
    assert not files["letter"].exists(), rows["letter"]
    assert status.doubted == 2, status
    assert "3 done (2 read with doubts)" in format_status(status)


def pencil_note(grey: int) -> Image.Image:
    """Three lines of 11 pt text in grey ``grey`` on a white A4 page at 300 dpi: a note in
    pencil or grey ink, which plain ``tesseract`` reads word for word."""
    from PIL import ImageFont

    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 46)
    image = Image.new("RGB", (2480, 3508), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(["Call Anna back about the lease", "before Friday, 10 am",
                              "bring the signed copy"]):
        draw.text((300, 500 + i * 70), line, fill=(grey,) * 3, font=font)
    return image


@pytest.mark.parametrize("on_success", ["delete", "archive"])
def test_a_pencil_note_not_read_is_a_doubt_never_a_blank_page(tmp_path: Path,
                                                              on_success: str) -> None:
    """Grey 150-200: too little ink for the blank measure, too few words for the
    faint-print check. Such a page is recorded blank unread, but as a doubt: the original
    stays and the reason says so (before: "1 blank", the original deleted)."""
    from ocrwatch.daemon import Daemon

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="tesseract", on_success=on_success,
                    archive_dir=tmp_path / "archive")
    files = {grey: inbox / f"note{grey}.png" for grey in (150, 180, 200)}
    for grey, path in files.items():
        pencil_note(grey).save(path, dpi=(300, 300))
    blank = inbox / "white.png"
    Image.new("RGB", (2480, 3508), "white").save(blank, dpi=(300, 300))
    data = {path: path.read_bytes() for path in files.values()}
    with Daemon(config) as daemon:
        wait_for(lambda: daemon.jobs.counts()["done"] == 4 and daemon.is_idle(), 180,
                 "every page read")
        rows = {Path(r["display"]).stem: dict(r)
                for r in daemon.db.query("SELECT * FROM jobs")}
    for path in files.values():
        row = rows[path.stem]
        assert path.exists() and path.read_bytes() == data[path], f"{path.name}: {row}"
        reason = row["retire_reason"] or ""
        assert "read" in reason and ("faint marks" in reason or "not read" in reason), row
    assert not blank.exists(), "a truly blank page stays blank, and its file goes"


# A letter of eight lines, as a user writes it, in the three scripts.
LETTERS = {
    "cyrillic": ["Уважаемый Иван Петрович,", "благодарим вас за письмо от 12 марта.",
                 "Счёт номер 4711 оплачен полностью.", "Мы будем рады видеть вас снова",
                 "в нашем магазине на улице Ленина.", "Просим сообщить нам, если вам",
                 "понадобятся копии договора.", "С уважением, Анна Смирнова"],
    "greek": ["Αγαπητέ κύριε Παπαδόπουλε,", "σας ευχαριστούμε για την επιστολή σας.",
              "Το τιμολόγιο αριθμός 4711 έχει πληρωθεί.", "Θα χαρούμε να σας δούμε ξανά",
              "στο κατάστημά μας στην Αθήνα.", "Παρακαλούμε ενημερώστε μας αν",
              "χρειάζεστε αντίγραφα της σύμβασης.", "Με εκτίμηση, Μαρία Γεωργίου"],
    "latin": ["Dear Mr Smith,", "thank you for your letter of 12 March.",
              "Invoice number 4711 has been paid in full.", "We look forward to seeing you",
              "again in our shop on the high street.", "Please let us know if you need",
              "copies of the contract.", "Yours sincerely, Anna Smith"],
}


# A till receipt in capitals and figures: OSD takes it for Cyrillic (script confidence 3.1,
# turn 4.4), but Tesseract reads it with eng at a mean word confidence of 85%.
RECEIPT = ["SUPERMARKET QUIET", "Store 522", "", *(
    f"{item:<22} {qty} {price:>7}" for item, qty, price in (
        ("BECAME YEARS", 1, "17.55"), ("THE SOMETIMES", 3, "9.96"), ("WANDERED", 4, "36.40"),
        ("MOTHER HERE", 1, "28.24"), ("WONDERED ANY", 1, "6.16"),
        ("UNBEARABLE PHOTO", 4, "86.72"), ("FROM", 4, "91.00"), ("TUG", 1, "14.94"),
        ("WERE", 4, "24.32"), ("DRAWINGS ALSO", 2, "50.38"), ("COUNSELING", 2, "40.18"),
        ("REPLY ABOUT", 4, "84.76"), ("TUG HICEM", 2, "16.72"), ("SUFFER", 3, "52.92"),
        ("ADDITION", 1, "15.91"), ("HERE TOGETHER", 2, "24.34"), ("WITH", 3, "63.96"),
        ("SHOW", 3, "56.58"), ("HER", 2, "58.46"))),
    "", "TOTAL                     779.50", "CARD 1853", "THANK YOU"]


def receipt_page() -> Image.Image:
    """:data:`RECEIPT` as a thermal printer prints it: DejaVu Sans Mono, grey, 80 mm at
    203 dpi (as ``benchmarks/heldout_set.py`` draws its receipts)."""
    from PIL import ImageFont

    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", 22)
    image = Image.new("L", (576, 48 + round(len(RECEIPT) * 22 * 1.35)), 255)
    draw = ImageDraw.Draw(image)
    for n, line in enumerate(RECEIPT):
        draw.text((24, 24 + round(n * 22 * 1.35)), line, font=font, fill=64)
    return image


def letter_page(lines: list[str]) -> Image.Image:
    """``lines`` in DejaVu Sans at 11 pt on the top half of an A4 page at 300 dpi."""
    from PIL import ImageFont

    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 46)
    image = Image.new("RGB", (2480, 1754), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((250, 300 + i * 80), line, fill=(0, 0, 0), font=font)
    return image


@pytest.mark.parametrize(("on_success", "rotate_pages"), [("delete", True), ("archive", False)])
def test_a_letter_in_a_script_the_languages_cannot_read_keeps_the_original(
        tmp_path: Path, on_success: str, rotate_pages: bool) -> None:
    """Real Tesseract with ``languages = ["eng"]``: a Cyrillic and a Greek letter read as
    Latin look-alikes (``YBaxkaempii``) at a mean confidence over 40%, so no other doubt
    caught them, and their originals went. OSD names their script: each is now read with
    a doubt that names the language to add, its original kept; ``status`` shows it. A
    Latin letter beside them still goes. With ``rotate_pages`` off OSD runs for the
    script alone. A receipt OSD takes for Cyrillic, but that Tesseract reads surely, goes
    too: the reading must confirm OSD's script."""
    from ocrwatch.daemon import Daemon

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    config = Config(inbox=[inbox], database=tmp_path / "index.sqlite3", settle_seconds=0.3,
                    engine="tesseract", languages=["eng"], on_success=on_success,
                    archive_dir=tmp_path / "archive", rotate_pages=rotate_pages)
    files = {name: inbox / f"{name}.png" for name in LETTERS}
    for name, path in files.items():
        letter_page(LETTERS[name]).save(path, dpi=(300, 300))
    files["receipt"] = inbox / "receipt.png"
    receipt_page().save(files["receipt"], dpi=(203, 203))
    data = {name: path.read_bytes() for name, path in files.items()}
    with Daemon(config) as daemon:
        wait_for(lambda: daemon.jobs.counts()["done"] == 4 and daemon.is_idle(), 180,
                 "every letter read")
        rows = {Path(r["display"]).stem: dict(r)
                for r in daemon.db.query("SELECT * FROM jobs")}
        status = daemon.status()
    text = format_status(status)
    for name, script, add in (("cyrillic", "Cyrillic", '"rus"'), ("greek", "Greek", '"ell"')):
        row = rows[name]
        assert files[name].is_file() and files[name].read_bytes() == data[name], \
            f"{name}: the original went: {row}"
        assert row["state"] == "done" and row["retire"] == "kept", row
        reason = row["retire_reason"] or ""
        assert f"looks {script}" in reason and 'languages = ["eng"]' in reason, reason
        assert f"add {add}" in reason, reason
        assert f"{name}.png: the page may not have been read: it looks {script}" in text, text
    for name in ("latin", "receipt"):
        assert wait_for(lambda n=name: not files[n].exists(), 10, f"{name} retired"), rows[name]
        assert rows[name]["retire"] is None, rows[name]
    assert status.doubted == 2, status
    assert "4 done (2 read with doubts)" in text, text
