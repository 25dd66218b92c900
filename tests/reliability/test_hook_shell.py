"""A file name never becomes code: a placeholder in a shell string or interpreter code is refused.

Each attack runs the real shells (sh, bash, dash where installed) through run_hook with a
file of that hostile name on disk; the hook writes the argument it got to a file, and no
file named PWNED may appear anywhere.
"""

from __future__ import annotations

import json
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
}

# Scripts that parse the value again: no quoting ocrwatch adds holds there. Each ran
# `touch PWNED` for a file named "h$(touch PWNED).png" when the value was quoted in.
REPARSED = {
    "eval": ["/bin/sh", "-c", "eval printf %s {file}"],
    "trap": ["/bin/sh", "-c", "trap \"printf %s {file}\" EXIT"],
    "nested sh -c": ["/bin/sh", "-c", "sh -c \"printf %s {file}\""],
    "flock -c inside": ["/bin/sh", "-c", "flock {lock} -c \"printf %s {file}\""],
    "xargs sh -c": ["/bin/sh", "-c", "printf %s {file} | xargs -0 -I@ sh -c 'echo @'"],
    "pipe into sh": ["/bin/sh", "-c", "echo printf %s {file} | sh"],
    "bash": ["/bin/bash", "-c", "eval printf %s {file}"],
    "perl -le": ["perl", "-le", "system(q{printf %s }.qq{{file}})"],
    "perl -ne": ["perl", "-ne", "BEGIN{system(qq{{file}})} print", "/dev/null"],
    "perl -pe": ["perl", "-pe", "BEGIN{system(qq{{file}})}", "/dev/null"],
    "node -pe": ["node", "-pe", "require('child_process').execSync(`{file}`)"],
    "sh -c with the path appended": ["/bin/sh", "-c"],
    "perl -e with the path appended": ["perl", "-e"],
}
HOSTILE = "h$(touch PWNED).png"


@pytest.mark.parametrize("form", list(REPARSED))
def test_a_file_name_never_becomes_code_in_a_script_that_parses_it_again(
        tmp_path: Path, form: str) -> None:
    argv = [a.replace("{lock}", str(tmp_path / "lock")) for a in REPARSED[form]]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    path = tmp_path / HOSTILE
    path.write_bytes(b"x")
    reason = check(argv)
    assert reason is not None and ("OCRWATCH_FILE" in reason or "$1" in reason), reason
    run_hook(argv, Finished(source=path, original=path), timeout=30)
    assert not list(tmp_path.rglob("PWNED")), f"{form}: the file name ran a command"
    assert not (Path.cwd() / "PWNED").exists()


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("where", list(SCRIPTS))
def test_a_placeholder_in_a_shell_string_is_refused_with_a_rewrite_that_works(
        tmp_path: Path, shell: str, where: str) -> None:
    """The message's rewrite ("$OCRWATCH_FILE" where {file} stood) gives the exact path
    for every hostile name, and runs nothing."""
    script, expected = SCRIPTS[where]
    out_marker = "/OUT"
    reason = check([shell, "-c", script.replace("{out}", out_marker)])
    assert reason is not None and "write it as " in reason, reason
    rewrite = json.loads(reason.split("write it as ", 1)[1].split("], or ", 1)[0] + "]")
    assert not any("{file}" in a for a in rewrite) and check(rewrite) is None
    for n, name in enumerate(NAMES):
        folder = tmp_path / f"case{n}"
        folder.mkdir()
        path = folder / name
        path.write_bytes(b"x")
        out = folder / "got"
        argv = [a.replace(out_marker, str(out)) for a in rewrite]
        assert run_hook(argv, Finished(source=path, original=path), timeout=30) == 0, name
        assert not list(tmp_path.rglob("PWNED")), f"{name!r} ran a command in {where}"
        assert not (Path.cwd() / "PWNED").exists()
        assert out.read_text() == expected.replace("{v}", str(path)), (name, where)


@pytest.mark.parametrize("argv", [
    ["/usr/bin/env", "bash", "-c", "printf '%s' {file} > {out}"],
    ["nice", "-n", "5", "sh", "-ec", "printf '%s' {file} > {out}"],
    ["/bin/bash", "--norc", "-o", "pipefail", "-c", "printf '%s' {file} > {out}"],
    ["timeout", "20", "/bin/sh", "-c", "printf '%s' \"$1\"{md} > {out}", "sh", "{file}"],
    ["flock", "{lock}", "-c", "printf '%s' {file} > {out}"],
    ["/bin/sh", "-c", "printf '%s' `printf '%s' {file}` > {out}"],
])
def test_shells_behind_wrappers_and_options_are_refused_too(argv: list[str]) -> None:
    reason = check(argv)
    assert reason is not None and "OCRWATCH_FILE" in reason, reason


@pytest.mark.parametrize("argv", [
    ["timeout", "20", "/bin/sh", "-c", "printf '%s' \"$1\" > {out}", "sh", "{file}"],
    ["/usr/bin/env", "bash", "-c", "printf '%s' \"$OCRWATCH_FILE\" > {out}"],
    ["perl", "-le", "open my $f, '>', $ARGV[1]; print $f $ARGV[0]", "{file}", "{out}"],
    ["node", "-e", "require('fs').writeFileSync(process.argv[2], process.argv[1])",
     "{file}", "{out}"],
])
def test_the_safe_forms_get_the_exact_path(tmp_path: Path, argv: list[str]) -> None:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    path = tmp_path / "a $(touch PWNED) `touch PWNED`; touch PWNED.png"
    path.write_bytes(b"x")
    out = tmp_path / "got"
    assert check(argv) is None
    real = [a.replace("{out}", str(out)) for a in argv]
    assert run_hook(real, Finished(source=path, original=path), timeout=30) == 0
    assert not list(tmp_path.rglob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    assert out.read_text().strip() == str(path)


def test_values_after_the_script_stay_plain_arguments() -> None:
    argv = ["/bin/sh", "-c", 'notify "$1" "$2"', "sh", "{file}", "{md}"]
    got = shell_safe(argv, lambda p: {"{file}": "/in/a 'b'.png", "{md}": "/in/$(x).md"}[p])
    assert got == ["/bin/sh", "-c", 'notify "$1" "$2"', "sh", "/in/a 'b'.png", "/in/$(x).md"]


@pytest.mark.parametrize("argv,what", [
    (["/bin/sh", "-c", "cat <<EOF\n{file}\nEOF"], "sh"),
    (["/bin/sh", "-c", "notify x # {file}"], "sh"),
    (["/bin/sh", "-c", "notify ${NAME:-{file}}"], "sh"),
    (["/bin/bash", "-c", "echo $(( {file} ))"], "bash"),
    (["fish", "-c", "notify {file}"], "fish"),
    (["perl", "-lne", "print {file}"], "perl"),
    (["perl", "-e'print {file}'"], "perl"),
    (["/usr/bin/python3", "-Ic", "print('{file}')"], "python"),
    (["node", "-pe", "'{file}'"], "node"),
    (["sed", "s/x/{file}/", "/etc/hostname"], "sed"),
    (["/bin/sh", "{file}"], "script file"),
    (["/usr/bin/python3", "{file}"], "script file"),
    (["parallel", "notify", ":::", "{file}"], "parallel"),
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
    ["perl", "-le", "print $ARGV[0]", "{file}"],
    ["node", "-pe", "process.argv[1]", "{file}"],
    ["/bin/sh", "-c", 'notify "$1"'],
    ["sh", "-c", "echo $OCRWATCH_FILE"],
])
def test_safe_forms_are_accepted(argv: list[str]) -> None:
    assert check(argv) is None


def test_the_config_refuses_an_unquotable_hook_naming_the_key(tmp_path: Path) -> None:
    from ocrwatch import config as config_mod
    from ocrwatch.core.errors import OcrwatchError

    path = tmp_path / "config.toml"
    path.write_text(f'inbox = ["{tmp_path}/inbox"]\n'
                    'on_done = ["/bin/sh", "-c", "notify-send done {file}"]\n')
    with pytest.raises(OcrwatchError) as err:
        config_mod.load(path)
    message = str(err.value)
    assert "on_done" in message
    assert '["/bin/sh", "-c", "notify-send done \\"$OCRWATCH_FILE\\""]' in message, message
