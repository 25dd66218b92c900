"""A file name in a shell's command string: quoted for that shell, or the form refused.

Each attack runs the real shells (sh, bash, dash where installed) through run_hook with a
file of that hostile name on disk; the hook writes the argument it got to a file, and no
file named PWNED may appear anywhere.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ocrwatch.core.hookshell import HookRefused, check, shell_safe
from ocrwatch.hooks.runner import Finished, run_hook

SHELLS = [s for s in ("/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/zsh", "/bin/ksh")
          if Path(s).exists()]

# Names that ran a command (or split into other words) when put into "sh -c" as they are.
NAMES = [
    "invoice $(touch PWNED).png",
    "invoice `touch PWNED`.png",
    "a; touch PWNED; b.png",
    "a\ntouch PWNED\n.png",
    "it's'; touch PWNED; '.png",
    'say "hi"; touch PWNED; ".png',
    "x${IFS}$(touch${IFS}PWNED).png",
    "-n $(touch PWNED) -e.png",
    "a' \"$(touch PWNED)\" '.png",
    "a\\'; touch PWNED; #.png",
    "a)$(touch PWNED)(.png",
    "end` touch PWNED `.png",
]

# Where the placeholder sits in the script, and what printf must have written then.
SCRIPTS = {
    "bare": ("printf '%s' {file} > {out}", "{v}"),
    "double quotes": ('printf \'%s\' "[{file}]" > {out}', "[{v}]"),
    "single quotes": ("printf '%s' '[{file}]' > {out}", "[{v}]"),
    "command substitution": ("printf '%s' \"$(printf '%s' {file})\" > {out}", "{v}"),
    "in quotes in $()": ('printf \'%s\' "$(printf \'%s\' "<{file}>")" > {out}', "<{v}>"),
    "backquotes": ("printf '%s' `printf '%s' {file}` > {out}", None),
}


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("where", list(SCRIPTS))
def test_a_file_name_in_a_shell_string_is_one_literal_word(tmp_path: Path, shell: str,
                                                           where: str) -> None:
    script, expected = SCRIPTS[where]
    for n, name in enumerate(NAMES):
        folder = tmp_path / f"case{n}"
        folder.mkdir()
        path = folder / name
        path.write_bytes(b"x")
        out = folder / "got"
        argv = [shell, "-c", script.replace("{out}", str(out))]
        assert run_hook(argv, Finished(source=path, original=path), timeout=30) == 0, name
        assert not list(tmp_path.rglob("PWNED")), f"{name!r} ran a command in {where}"
        assert not (Path.cwd() / "PWNED").exists()
        got = out.read_text()
        if expected is not None:
            assert got == expected.replace("{v}", str(path)), (name, where)
        elif "\n" not in name and " " not in name and "\t" not in name:
            assert got == str(path)  # backquotes split words; the name still runs nothing


@pytest.mark.parametrize("argv", [
    ["/usr/bin/env", "bash", "-c", "printf '%s' {file} > {out}"],
    ["nice", "-n", "5", "sh", "-ec", "printf '%s' {file} > {out}"],
    ["/bin/bash", "--norc", "-o", "pipefail", "-c", "printf '%s' {file} > {out}"],
    ["timeout", "20", "/bin/sh", "-c", "printf '%s' \"$1\"{md} > {out}", "sh", "{file}"],
    ["flock", "{lock}", "-c", "printf '%s' {file} > {out}"],
])
def test_shells_behind_wrappers_and_options_are_quoted_too(tmp_path: Path,
                                                           argv: list[str]) -> None:
    path = tmp_path / "a $(touch PWNED) `touch PWNED`; touch PWNED.png"
    path.write_bytes(b"x")
    out = tmp_path / "got"
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    real = [a.replace("{out}", str(out)).replace("{lock}", str(tmp_path / "lock"))
            for a in argv]
    item = Finished(source=path, original=path, md=tmp_path / "b $(touch PWNED).md")
    assert run_hook(real, item, timeout=30) == 0
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    got = out.read_text()
    assert str(path) in got


def test_values_after_the_script_stay_plain_arguments() -> None:
    argv = ["/bin/sh", "-c", 'notify "$1" {md}', "sh", "{file}"]
    got = shell_safe(argv, lambda p: {"{file}": "/in/a 'b'.png", "{md}": "/in/$(x).md"}[p])
    assert got == ["/bin/sh", "-c", "notify \"$1\" '/in/$(x).md'", "sh", "/in/a 'b'.png"]


@pytest.mark.parametrize("argv,what", [
    (["/bin/sh", "-c", "cat <<EOF\n{file}\nEOF"], "here-document"),
    (["/bin/sh", "-c", "notify x # {file}"], "comment"),
    (["/bin/sh", "-c", "notify ${NAME:-{file}}"], "${...}"),
    (["/bin/bash", "-c", "echo $(( {file} ))"], "${...} or $((...))"),
    (["fish", "-c", "notify {file}"], "fish"),
    (["/usr/bin/python3", "-c", "import os; os.system('notify {file}')"], "python"),
    (["perl", "-e", "system('notify {file}')"], "perl"),
    (["node", "--eval=run('{file}')"], "node"),
    (["awk", "BEGIN { system(\"notify {file}\") }"], "awk"),
    (["ssh", "host", "notify", "{file}"], "ssh"),
    (["su", "me", "-c", "notify {file}"], "su"),
    (["env", "-S", "notify {file}"], "env -S"),
])
def test_forms_that_cannot_be_quoted_are_refused_with_a_way_out(argv: list[str],
                                                                 what: str) -> None:
    reason = check(argv)
    assert reason is not None and what in reason, reason
    assert "OCRWATCH_FILE" in reason
    with pytest.raises(HookRefused):
        shell_safe(argv, lambda _p: "/in/x.png")


@pytest.mark.parametrize("argv", [
    ["/usr/bin/notify-send", "done", "{file}"],
    ["/bin/sh", "-c", 'notify "$OCRWATCH_FILE"'],
    ["/bin/sh", "/home/me/hook.sh", "{file}", "{md}"],
    ["/usr/bin/python3", "/home/me/hook.py", "{file}"],
    ["/usr/bin/python3", "-c", "import sys; print(sys.argv[1])", "{file}"],
    ["awk", "{ print }", "{txt}"],
])
def test_safe_forms_are_accepted(argv: list[str]) -> None:
    assert check(argv) is None


def test_the_config_refuses_an_unquotable_hook_naming_the_key(tmp_path: Path) -> None:
    from ocrwatch import config as config_mod
    from ocrwatch.core.errors import OcrwatchError

    path = tmp_path / "config.toml"
    path.write_text(f'inbox = ["{tmp_path}/inbox"]\n'
                    'on_done = ["/bin/sh", "-c", "cat <<EOF\\n{file}\\nEOF"]\n')
    with pytest.raises(OcrwatchError) as err:
        config_mod.load(path)
    assert "on_done" in str(err.value) and "here-document" in str(err.value)
