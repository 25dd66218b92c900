"""Languages: English plus the desktop's language by default, said when it is missing,
and `ocrwatch reread` after a change reads only what was read otherwise."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from helpers import child_env, ocrwatch, text_page

from ocrwatch.config import Config
from ocrwatch.config.languages import (
    available_languages,
    default_languages,
    desktop_locale,
    locale_language,
    locale_note,
)
from ocrwatch.core.status import format_status
from ocrwatch.daemon import Daemon
from ocrwatch.doctor import checks as doctor

HAVE = {"eng": Path("eng.traineddata"), "deu": Path("deu.traineddata")}


def test_the_default_is_english_and_the_desktops_language_when_installed() -> None:
    assert default_languages({"LANG": "de_DE.UTF-8"}, HAVE) == ["eng", "deu"]
    assert default_languages({"LANG": "fr_FR.UTF-8"}, HAVE) == ["eng"]  # no French data
    assert default_languages({"LANG": "en_GB.UTF-8"}, HAVE) == ["eng"]
    assert default_languages({"LANG": "C.UTF-8"}, HAVE) == ["eng"]
    assert default_languages({}, HAVE) == ["eng"]
    # LC_ALL wins over LC_MESSAGES, which wins over LANG.
    assert default_languages({"LC_ALL": "de_AT.UTF-8", "LANG": "fr_FR.UTF-8"}, HAVE) == [
        "eng", "deu"]
    assert desktop_locale({"LC_MESSAGES": "de_CH.UTF-8@euro", "LANG": "C"}) == "de_CH"
    assert locale_language({"LANG": "zh_TW.UTF-8"}) == "chi_tra"
    assert locale_language({"LANG": "zh_CN.UTF-8"}) == "chi_sim"
    assert locale_language({"LANG": "pt_BR.UTF-8"}) == "por"
    assert locale_language({"LANG": "xx_YY.UTF-8"}) is None


def test_a_missing_desktop_language_is_said_with_the_package() -> None:
    note = locale_note(["eng"], {"LANG": "fr_FR.UTF-8"}, HAVE)
    assert note is not None and "fr_FR" in note and "tesseract-ocr-fra" in note
    assert locale_note(["eng", "deu"], {"LANG": "de_DE.UTF-8"}, HAVE) is None
    assert locale_note(["eng"], {"LANG": "de_DE.UTF-8"}, HAVE) is None  # left out on purpose
    assert locale_note(["eng"], {"LANG": "C.UTF-8"}, HAVE) is None


def test_status_and_doctor_say_so(tmp_path: Path, home: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    missing = next(code for code in ("ell", "fin", "hun", "tur") if code not in
                   available_languages())
    loc = {"ell": "el_GR", "fin": "fi_FI", "hun": "hu_HU", "tur": "tr_TR"}[missing]
    monkeypatch.setenv("LANG", f"{loc}.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    config = Config(inbox=[tmp_path / "inbox"], database=tmp_path / "db.sqlite3",
                    engine="tesseract")
    assert config.languages == ["eng"]
    daemon = Daemon(config, watch=False)
    try:
        status = daemon.status()
    finally:
        daemon.close()
    assert status.languages == ("eng",)
    assert status.language_note and f"tesseract-ocr-{missing}" in status.language_note
    text = format_status(status)
    assert "languages: eng" in text and f"note:    the desktop's language ({loc})" in text
    # Without a daemon, `ocrwatch status` says so too.
    offline = ocrwatch(["status", "--database", str(tmp_path / "db.sqlite3")],
                       child_env(home, {"LANG": f"{loc}.UTF-8", "OCRWATCH_ENGINE": "tesseract"}))
    assert f"tesseract-ocr-{missing}" in offline.stdout, offline.stdout + offline.stderr
    checks = {c.name: c for c in doctor.check_tesseract(config)}
    assert checks["Tesseract languages"].ok
    desktop = checks["Desktop language"]
    assert not desktop.ok and f"tesseract-ocr-{missing}" in desktop.fix


def _read_with(database: Path) -> dict[str, str | None]:
    conn = sqlite3.connect(database)
    try:
        return {Path(p.decode()).name: r for p, r in
                conn.execute("SELECT path, read_with FROM jobs WHERE state = 'done'")}
    finally:
        conn.close()


@pytest.mark.skipif("fra" not in available_languages(), reason="needs tesseract-ocr-fra")
def test_reread_reads_only_what_was_read_with_other_languages(tmp_path: Path,
                                                              home: Path) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    for name, words in (("a.png", "Le garçon mange une pomme"), ("b.png", "Café crème")):
        text_page([words]).save(folder / name, dpi=(200, 200))
    database = tmp_path / "index.sqlite3"
    env = child_env(home)
    common = ["--database", str(database), "--inbox", str(folder), "--engine", "tesseract"]
    first = ocrwatch(["add", *common, "--languages", "eng", str(folder)], env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert _read_with(database) == {"a.png": "tesseract eng", "b.png": "tesseract eng"}

    same = ocrwatch(["reread", *common, "--languages", "eng"], env, timeout=300)
    assert same.returncode == 0, same.stderr
    assert "nothing to read again" in same.stdout

    changed = ocrwatch(["reread", *common, "--languages", "eng,fra"], env, timeout=300)
    assert changed.returncode == 0, changed.stderr
    assert "reading 2 files again with tesseract eng+fra" in changed.stderr
    assert re.search(r"reading: +100%.* 2/2 ", changed.stderr), changed.stderr  # the bar
    assert "2 read again, 0 failed" in changed.stdout
    assert _read_with(database) == {"a.png": "tesseract eng+fra",
                                    "b.png": "tesseract eng+fra"}
    assert "Traceback" not in changed.stderr

    again = ocrwatch(["reread", *common, "--languages", "eng,fra"], env, timeout=300)
    assert "nothing to read again" in again.stdout  # nothing unchanged is read twice


def test_which_languages_read_which_script() -> None:
    """The script table (``ocrwatch/config/scripts.py``): a Latin language reads Latin and
    Fraktur, not Cyrillic or Greek; a language or a script model of that script does;
    a script the table does not know ("Common") is never said to be unread."""
    from ocrwatch.config import scripts

    assert scripts.unread("Cyrillic", ["eng"]) and scripts.unread("Greek", ["eng", "deu"])
    assert not scripts.unread("Cyrillic", ["eng", "rus"])
    assert not scripts.unread("Cyrillic", ["eng", "script/Cyrillic"])
    assert not scripts.unread("Greek", ["ell"])
    assert not scripts.unread("Latin", ["fra"]) and not scripts.unread("Fraktur", ["deu"])
    assert scripts.unread("Latin", ["rus"])  # Russian alone reads English as Cyrillic
    assert not scripts.unread("Han", ["jpn"]) and not scripts.unread("Hangul", ["kor"])
    assert not scripts.unread("Common", ["eng"]) and not scripts.unread("", ["eng"])
    assert scripts.readers("Cyrillic")[0] == "rus" and scripts.readers("Greek")[0] == "ell"


def test_a_script_doubt_needs_osd_sure_of_the_script_and_of_print() -> None:
    """OSD's script is taken only with a script confidence of 1 or more on a page it finds
    print on (turn confidence 2 or more): on a page of a few marks it named Devanagari at
    2.2 and Cyrillic at 1.1, with turn confidences under 0.2."""
    from ocrwatch.engines import registry
    from ocrwatch.scan import script
    from ocrwatch.scan.orient import Orientation

    sure = Orientation(0, 19.8, script="Cyrillic", script_confidence=14.8)
    why = script.doubt(sure, ["eng"])
    assert why == ('it looks Cyrillic, which languages = ["eng"] cannot read: add "rus" '
                   '(or "ukr", "bul"...) to languages')
    assert 'add "ell" (or "grc") to' in (script.doubt(
        Orientation(0, 9.8, script="Greek", script_confidence=1.1), ["eng", "deu"]) or "")
    assert script.doubt(sure, ["eng", "ukr"]) is None
    assert script.doubt(Orientation(0, 0.03, script="Devanagari", script_confidence=2.2),
                        ["eng"]) is None
    assert script.doubt(Orientation(0, 12.0, script="Cyrillic", script_confidence=0.6),
                        ["eng"]) is None
    assert script.doubt(Orientation(0, -1.0), ["eng"]) is None  # OSD undecided or missing
    # And the reading must be unsure: look-alikes read at 39-59%, receipts OSD took for
    # Cyrillic at 85-95%.
    assert script.confirmed(55.0) and not script.confirmed(91.0)
    assert not script.confirmed(None)
    # Only engines that read with ``languages`` are checked: a model reads any script.
    assert registry.reads_languages("tesseract")
    assert not registry.reads_languages("remote") and not registry.reads_languages("vllm")
