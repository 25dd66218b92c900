"""`ocrwatch completion SHELL`: scripts made from the parser that the real shells load
and complete with (fish and bash, in a private home), new commands and options included."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import child_env, ocrwatch


def test_fish_completes_commands_and_options(tmp_path: Path) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed (apt install fish)")
    env = child_env(tmp_path / "home")
    script = ocrwatch(["completion", "fish"], env, check=True).stdout
    where = tmp_path / "home" / ".config" / "fish" / "completions" / "ocrwatch.fish"
    where.parent.mkdir(parents=True)
    where.write_text(script)  # where the command's example puts it

    def complete(line: str) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c",
                               f"source {where}; complete -C '{line}'"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert {"restart", "reread", "reindex", "reload", "rescan", "resume",
            "retry"} <= set(complete("ocrwatch re"))
    assert "--jobs" in complete("ocrwatch add --j")
    assert "--force" in complete("ocrwatch add --f")
    assert set(complete("ocrwatch completion ")) >= {"bash", "zsh", "fish", "tcsh"}


def test_bash_completes_the_new_commands(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    env = child_env(tmp_path / "home")
    script = tmp_path / "ocrwatch.bash"
    script.write_text(ocrwatch(["completion", "bash"], env, check=True).stdout)
    probe = (f"source {script}; COMP_WORDS=(ocrwatch un); COMP_CWORD=1; "
             "_shtab_ocrwatch; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["uninstall"]
