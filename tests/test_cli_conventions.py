"""The command line's conventions: every documented exit status, bare `ocrwatch`, the
languages' "eng+fra" form, `doctor --json`, `init`, shell completion, the man page and
the Python API. Each runs the real program in a process of its own, in a private home."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import write_image
from reliability.helpers import DaemonProcess, Home, ocrwatch_cli

import ocrwatch
from ocrwatch.cli.parser import build_parser
from ocrwatch.engines.tesseract import available_languages

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    h = Home.make(tmp_path)
    yield h
    h.cleanup()


@pytest.fixture
def daemon(home: Home) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(home).start()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.close()


def commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[arg-type]


def test_the_readme_documents_the_exit_statuses_tested_here() -> None:
    readme = (ROOT / "README.md").read_text()
    assert ("Exit statuses: 0 fine, 1 failure, 2 bad configuration or\nquery, or a command "
            "line wrong in itself (the command's usage and what is wrong, as\nfor an unknown "
            "option), 3 engine unavailable, 4 a daemon already runs, 5 no daemon runs, 141"
            ) in readme


# -- one test per documented exit status --------------------------------------------------
def test_exit_0_fine_and_1_failure(home: Home) -> None:
    letter = write_image(home.root / "letter.png", ["harbour office"])
    added = ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(home.database),
                         str(letter))
    assert added.returncode == 0, added.stderr
    found = ocrwatch_cli(home, "search", "--database", str(home.database), "fake")
    assert found.returncode == 0 and "letter.png" in found.stdout
    missed = ocrwatch_cli(home, "search", "--database", str(home.database), "zebra")
    assert missed.returncode == 1 and "no matches" in missed.stderr


def test_exit_2_bad_configuration_or_query(home: Home) -> None:
    bad = home.root / "bad.toml"
    bad.write_text("settle_seconds = 'soon'\n")
    result = ocrwatch_cli(home, "doctor", "--config", str(bad))
    assert result.returncode == 2 and "settle_seconds" in result.stderr
    assert "Traceback" not in result.stderr
    letter = write_image(home.root / "letter.png", ["harbour"])
    ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(home.database), str(letter))
    query = ocrwatch_cli(home, "search", "--database", str(home.database), '"unclosed')
    assert query.returncode == 2, query.stderr


@pytest.mark.parametrize("command", [
    ["search"], ["search", "--json"], ["search", "--page", "0", "harbour"], ["retry"],
], ids=["search", "search-json", "search-page-0", "retry"])
def test_exit_2_a_command_line_wrong_in_itself(home: Home, command: list[str]) -> None:
    """As argparse's own errors: the command's usage, the message, 2, never 1 (which
    `search` gives for no hits and the other commands for a failure)."""
    letter = write_image(home.root / "letter.png", ["harbour"])
    ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(home.database), str(letter))
    result = ocrwatch_cli(home, *command, "--database", str(home.database))
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.startswith(f"usage: ocrwatch {command[0]} "), result.stderr
    assert f"ocrwatch {command[0]}: error: " in result.stderr and result.stdout == ""
    assert "Traceback" not in result.stderr


def test_exit_3_engine_unavailable(home: Home) -> None:
    pytest.importorskip("PIL")
    if __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the engine is available")
    letter = write_image(home.root / "letter.png", ["harbour"])
    result = ocrwatch_cli(home, "add", "--engine", "vllm", "--database", str(home.database),
                          str(letter))
    assert result.returncode == 3 and "vLLM is not installed" in result.stderr


def test_exit_4_a_daemon_already_runs(home: Home, daemon: DaemonProcess) -> None:
    second = ocrwatch_cli(home, *daemon.args)
    assert second.returncode == 4, second.stderr
    assert "already running" in second.stderr or "already runs" in second.stderr


def test_exit_5_no_daemon_runs_status_included(home: Home) -> None:
    for command in (["status"], ["status", "--json"], ["pause"], ["resume"], ["rescan"],
                    ["stop"]):
        result = ocrwatch_cli(home, *command, "--database", str(home.database)
                              ) if command[0] == "status" else ocrwatch_cli(home, *command)
        assert result.returncode == 5, (command, result.returncode, result.stderr)
    shown = ocrwatch_cli(home, "status", "--database", str(home.database))
    assert "no daemon is running" in shown.stderr and "queue:" in shown.stdout
    as_json = ocrwatch_cli(home, "status", "--json", "--database", str(home.database))
    assert json.loads(as_json.stdout)["running"] is False


def test_status_with_the_daemon_running_exits_0(home: Home, daemon: DaemonProcess) -> None:
    result = ocrwatch_cli(home, "status", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["running"] is True


def test_exit_141_the_reader_went_away(home: Home) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "--help"], env=home.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    # argparse prints --help itself and exits 0 when the pipe is still open; closed, the
    # program ends as `status | head -1` does.
    assert "Traceback" not in err
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "status", "--database",
                             str(home.database)], env=home.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and "Traceback" not in err, err


# -- conventions ----------------------------------------------------------------------------
def test_bare_ocrwatch_prints_help(home: Home) -> None:
    result = ocrwatch_cli(home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ocrwatch")
    assert "search" in result.stdout and "COMMAND --help" in result.stdout
    assert result.stderr == ""


def test_languages_take_the_plus_form_and_never_suggest_a_plus_package(home: Home) -> None:
    result = ocrwatch_cli(home, "doctor", "--json", "--engine", "tesseract",
                          "--languages", "eng+zzz")
    assert result.returncode == 1, result.stderr  # zzz is missing: a problem, said so
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    langs = checks["Tesseract languages"]
    assert langs["ok"] is False and "missing: zzz" in langs["detail"]
    assert "tesseract-ocr-zzz" in langs["fix"] and "+" not in langs["fix"]
    commas = ocrwatch_cli(home, "doctor", "--json", "--engine", "tesseract",
                          "--languages", "eng,zzz")
    same = {c["name"]: c for c in json.loads(commas.stdout)}["Tesseract languages"]
    assert same == langs


@pytest.mark.skipif("fra" not in available_languages(), reason="needs tesseract-ocr-fra")
def test_status_shows_plus_languages_as_codes(home: Home) -> None:
    result = ocrwatch_cli(home, "status", "--json", "--database", str(home.database),
                          OCRWATCH_LANGUAGES="eng+fra", OCRWATCH_ENGINE="tesseract")
    assert json.loads(result.stdout)["languages"] == ["eng", "fra"]


def test_doctor_json_is_a_list_of_checks(home: Home) -> None:
    result = ocrwatch_cli(home, "doctor", "--json", "--engine", "tesseract",
                          "--languages", "eng")
    checks = json.loads(result.stdout)
    assert isinstance(checks, list) and checks
    for check in checks:
        assert set(check) == {"name", "ok", "detail", "fix"}
    assert result.returncode == (0 if all(c["ok"] for c in checks) else 1)


def test_completion_scripts_come_from_the_parser(home: Home) -> None:
    bash = ocrwatch_cli(home, "completion", "bash")
    assert bash.returncode == 0
    assert "complete" in bash.stdout and "_shtab_ocrwatch" in bash.stdout
    for name in commands():
        assert name in bash.stdout
    assert "--languages" in bash.stdout and "--all-failed" in bash.stdout
    checked = subprocess.run(["bash", "-n"], input=bash.stdout, text=True,
                             capture_output=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    zsh = ocrwatch_cli(home, "completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef ocrwatch")


def test_man_page_comes_from_the_parser(home: Home) -> None:
    page = ocrwatch_cli(home, "manpage")
    assert page.returncode == 0
    assert page.stdout.startswith(".TH OCRWATCH \"1\"")
    for name in commands():
        assert f"'ocrwatch {name}'" in page.stdout, name
    assert "\\-\\-languages" in page.stdout or "--languages" in page.stdout
    man = subprocess.run(["man", "-l", "-"], input=page.stdout, text=True,
                         capture_output=True, timeout=30, env={**home.env(), "MANPAGER": "cat",
                                                               "PAGER": "cat"})
    if man.returncode == 0:  # where man is installed, the page renders
        assert "ocrwatch" in man.stdout


def test_init_writes_the_example_from_the_package(home: Home) -> None:
    from ocrwatch.cli.desktop import example_config

    target = home.root / "home" / ".config" / "ocrwatch" / "config.toml"
    result = ocrwatch_cli(home, "init")
    assert result.returncode == 0, result.stderr
    assert target.read_text() == example_config() == (ROOT / "config.example.toml").read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    target.write_text(target.read_text() + "\n# mine\n")
    again = ocrwatch_cli(home, "init")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert target.read_text().endswith("# mine\n")  # left alone
    forced = ocrwatch_cli(home, "init", "--force")
    assert forced.returncode == 0
    assert target.with_name("config.toml.bak").read_text().endswith("# mine\n")
    assert target.read_text() == example_config()
    printed = ocrwatch_cli(home, "init", "--print")
    assert printed.stdout == example_config()
    loaded = ocrwatch_cli(home, "doctor", "--json")
    assert loaded.returncode in (0, 1), loaded.stderr  # the written file loads


# -- the Python API -------------------------------------------------------------------------
def test_python_api_reads_a_file_and_searches_the_index(
        home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in home.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OCRWATCH_ENGINE", "tesseract")
    letter = write_image(home.root / "letter.png", ["the harbour office in Rotterdam"])
    pages = ocrwatch.read(letter)
    assert len(pages) == 1 and pages[0].error is None
    assert "harbour" in pages[0].text.lower()
    assert not letter.with_suffix(".md").exists()  # read writes nothing
    added = ocrwatch_cli(home, "add", "--database", str(home.database), "--engine",
                         "tesseract", str(letter))
    assert added.returncode == 0, added.stderr
    hits = ocrwatch.search("harbour", database=home.database)
    assert [Path(h.path).name for h in hits] == ["letter.png"] and hits[0].page == 1
    assert re.search("harbour", hits[0].snippet, re.I)
    with pytest.raises(ocrwatch.core.errors.InputError):
        ocrwatch.read(home.root / "missing.png")
