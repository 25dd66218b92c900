"""`ocrwatch add --force` reads again a file read before (its sidecars deleted), and
`--jobs N` sets how many pages are read at once for that run. Real processes in a private
home, real files, real SQLite, real Tesseract for --jobs."""

from __future__ import annotations

from pathlib import Path

from helpers import child_env, normalize, ocrwatch, text_page


def test_add_force_reads_again_a_file_whose_sidecars_were_deleted(tmp_path: Path) -> None:
    env = child_env(tmp_path / "home")
    folder = tmp_path / "scans"
    folder.mkdir()
    text_page(["A letter from the harbour office"]).save(folder / "letter.png")
    sidecar = folder / "letter.md"
    first = ocrwatch(["add", "--engine", "fake", str(folder)], env, check=True)
    assert "1 read, 0 failed" in first.stdout
    assert sidecar.exists()

    sidecar.unlink()
    (folder / "letter.txt").unlink()
    again = ocrwatch(["add", "--engine", "fake", str(folder)], env, check=True)
    # Without --force an unchanged file is left as it was, and the way to read it is said.
    assert "1 file already read and unchanged since" in again.stderr
    assert "`ocrwatch add --force` reads it again" in again.stderr
    assert not sidecar.exists()

    forced = ocrwatch(["add", "--force", "--engine", "fake", str(folder / "letter.png")],
                      env, check=True)
    assert "1 read, 0 failed" in forced.stdout
    assert "already read" not in forced.stderr
    assert sidecar.exists() and (folder / "letter.txt").exists()


def test_add_force_keeps_a_corrected_sidecar(tmp_path: Path) -> None:
    env = child_env(tmp_path / "home")
    scan = tmp_path / "ledger.png"
    text_page(["Ledger"]).save(scan)
    ocrwatch(["add", "--engine", "fake", str(scan)], env, check=True)
    sidecar = tmp_path / "ledger.md"
    sidecar.write_text("my corrected text\n")
    ocrwatch(["add", "--force", "--engine", "fake", str(scan)], env, check=True)
    assert sidecar.read_text() == "my corrected text\n"  # never overwritten
    assert (tmp_path / "ledger.png.md").exists()  # the new reading beside it


def test_jobs_sets_the_pages_read_at_once_for_this_run(tmp_path: Path) -> None:
    env = child_env(tmp_path / "home")
    scan = tmp_path / "note.png"
    text_page(["Vienna office"]).save(scan, dpi=(200, 200))
    config = tmp_path / "config.toml"
    config.write_text("workers = 1\n")
    result = ocrwatch(["add", "--config", str(config), "--engine", "tesseract", "--jobs", "3",
                       "--log-level", "DEBUG", str(scan)], env, timeout=300, check=True)
    assert "3 pages at once" in result.stderr  # the flag wins over the file's workers = 1
    assert "vienna" in normalize((tmp_path / "note.txt").read_text())
    refused = ocrwatch(["add", "--jobs", "0", str(scan)], env)
    assert refused.returncode == 2
    assert "0 is out of range: use 1 to 256" in refused.stderr
