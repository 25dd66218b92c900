"""Logging set-up: rotating file in the log folder, stderr, no doubled handlers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrwatch.cli import logs
from ocrwatch.core.errors import OcrwatchError
from ocrwatch.fs import paths


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)
    logging.captureWarnings(False)


def test_default_file_in_log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "log_dir", lambda: tmp_path / "logs")
    path = logs.setup_logging("INFO", stderr=False)
    assert path == tmp_path / "logs" / "ocrwatch.log"
    assert logs.current_log_file() == path
    logging.getLogger("ocrwatch.test").info("hello from the test")
    logging.getLogger("ocrwatch.test").debug("not at INFO")
    text = path.read_text(encoding="utf-8")
    assert "INFO" in text and "ocrwatch.test: hello from the test" in text
    assert "not at INFO" not in text


def test_stderr_and_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = logs.setup_logging("debug", log_file=tmp_path / "x.log")
    logging.getLogger("ocrwatch.x").debug("fine detail")
    assert "fine detail" in capsys.readouterr().err
    assert "fine detail" in path.read_text(encoding="utf-8")


def test_called_twice_does_not_double_lines(tmp_path: Path) -> None:
    logs.setup_logging("INFO", log_file=tmp_path / "a.log", stderr=True)
    path = logs.setup_logging("INFO", log_file=tmp_path / "b.log", stderr=True)
    ours = [h for h in logging.getLogger().handlers if getattr(h, logs._MARK, False)]
    assert len(ours) == 2
    logging.getLogger("ocrwatch.y").warning("once")
    assert path.read_text(encoding="utf-8").count("once") == 1
    assert "once" not in (tmp_path / "a.log").read_text(encoding="utf-8")


def test_rotates(tmp_path: Path) -> None:
    path = logs.setup_logging("INFO", log_file=tmp_path / "r.log", stderr=False,
                              max_bytes=2000, backups=2)
    log = logging.getLogger("ocrwatch.rot")
    for i in range(200):
        log.info("line %d %s", i, "x" * 40)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["r.log", "r.log.1", "r.log.2"]
    assert path.stat().st_size <= 2000


def test_bad_level_and_unwritable_folder(tmp_path: Path) -> None:
    with pytest.raises(OcrwatchError, match="DEBUG, INFO"):
        logs.setup_logging("LOUD", log_file=tmp_path / "x.log")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OcrwatchError, match="cannot write the log file"):
        logs.setup_logging("INFO", log_file=blocker / "x.log")
