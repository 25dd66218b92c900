"""`ocrwatch search` with names and filters, and `--web` from a real running daemon."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import child_env, ocrwatch, save_pdf, text_page, wait_for
from test_e2e import Running


def names(result_stdout: str) -> list[str]:
    return [Path(h["path"]).name for h in json.loads(result_stdout)]


@pytest.fixture
def running(tmp_path: Path) -> Running:
    daemon = Running(tmp_path, ["--no-tray", "--engine", "fake"])
    wait_for(daemon.status, 60, "the daemon to answer")
    return daemon


def test_names_filters_and_the_page_from_the_daemon(running: Running, tmp_path: Path) -> None:
    try:
        inbox = running.inbox
        (inbox / "Taxes 2024").mkdir(parents=True)
        text_page(["x"]).save(inbox / "Taxes 2024" / "receipt.png")
        save_pdf(inbox / "harbour letter.pdf", [["a"], ["b"]])
        text_page(["x"]).save(inbox / "note.jpg", "JPEG")
        wait_for(lambda: (s := running.status()) is not None and s.get("done") == 3, 60,
                 "three files read")
        env = running.env

        by_name = ocrwatch(["search", "--json", "--name", "taxes"], env, check=True)
        assert names(by_name.stdout) == ["receipt.png"]
        both = ocrwatch(["search", "--json", "--name", "harbour", "fake"], env, check=True)
        assert names(both.stdout) == ["harbour letter.pdf"] * 2
        pdf = ocrwatch(["search", "--json", "--type", "pdf", "--limit", "1", "--page", "2",
                        "fake"], env, check=True)
        assert names(pdf.stdout) == ["harbour letter.pdf"]
        folder = ocrwatch(["search", "--json", "--folder", str(inbox / "Taxes 2024"), "fake"],
                          env, check=True)
        assert names(folder.stdout) == ["receipt.png"]
        later = ocrwatch(["search", "--after", "2999-01-01", "fake"], env)
        assert later.returncode == 1
        bad = ocrwatch(["search", "--before", "someday", "fake"], env)
        assert bad.returncode == 2 and "YYYY-MM-DD" in bad.stderr

        web = ocrwatch(["search", "--web", "--no-open"], env, check=True)
        url = web.stdout.strip()
        assert url.startswith("http://127.0.0.1:") and "?token=" in url
        base, token = url.split("?token=")
        request = urllib.request.Request(base + "api/search?q=fake",
                                         headers={"X-Ocrwatch-Token": token})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert len(json.load(reply)["hits"]) == 4
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "api/search?q=fake", timeout=10)
        assert refused.value.code == 403
        # Asked again, the same server answers.
        again = ocrwatch(["search", "--web", "--no-open"], env, check=True)
        assert again.stdout.strip() == url
    finally:
        assert running.stop() == 0
    # The daemon gone, the page's address file is gone with it.
    assert not (tmp_path / "run" / "ocrwatch" / "search-url").exists()


def test_web_without_a_daemon_serves_from_the_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = child_env(tmp_path)
    db = tmp_path / "index.sqlite3"
    ocrwatch(["add", "--engine", "tesseract", "--database", str(db),
              str(save_pdf(tmp_path / "a.pdf", [["Harbour office"]]))], env, check=True)
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "search", "--web", "--no-open",
                             "--database", str(db)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        base, token = url.split("?token=")
        request = urllib.request.Request(base + "api/search?q=harbour",
                                         headers={"X-Ocrwatch-Token": token})
        with urllib.request.urlopen(request, timeout=10) as reply:
            hits = json.load(reply)["hits"]
        assert [h["name"] for h in hits] == ["a.pdf"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
