"""Placeholders inside code that ``on_done`` hands to a shell or an interpreter.

``on_done`` is an argv list, so ``["notify", "{file}"]`` gives the program the path as
one argument whatever the file is called. But ``["/bin/sh", "-c", "notify {file}"]``
puts the path into a shell's command string, where a file named ``a $(touch x).png``
would run ``touch``. So:

- in the command string of a POSIX shell (``sh``, ``bash``, ``dash``, ``zsh``, ``ksh``...
  after ``-c``, also behind wrappers such as ``env``, ``nice``, ``timeout``, ``flock -c``)
  each placeholder is replaced by its value quoted for that shell (:func:`shlex.quote`),
  with the quoting context it sits in taken into account (bare, inside ``"..."``,
  ``'...'``, ``$(...)`` or backquotes);
- where no quoting can hold (a here-document, a comment, ``${...}`` or ``$((...))``, the
  code of another shell or of an interpreter such as ``python -c``, a command line for a
  remote or other user's shell such as ``ssh`` or ``su -c``) the form is refused with
  :class:`HookRefused`, whose message says what to write instead: the values are also in
  the environment (``"$OCRWATCH_FILE"``) and can be passed as arguments after the script.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable

from ocrwatch.core.errors import ConfigError

PLACEHOLDERS = ("{file}", "{source}", "{md}", "{txt}", "{pdf}")
# One pass over each argument: a value put in (a file named "{md}.png") is never searched
# for placeholders again.
PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))

POSIX_SHELLS = frozenset({"sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "ksh93",
                          "mksh", "lksh", "pdksh", "oksh", "yash", "posh", "hush"})
# Shells whose quoting is not POSIX's: a -c string for them is refused.
OTHER_SHELLS = frozenset({"fish", "csh", "tcsh", "nu", "pwsh", "powershell", "xonsh",
                          "elvish", "rc", "es", "ion", "cmd"})
# Interpreters and the options after which their code comes.
INTERPRETERS: dict[str, tuple[str, ...]] = {
    "python": ("-c",), "pypy": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",),
    "node": ("-e", "-p", "--eval", "--print"), "nodejs": ("-e", "-p", "--eval", "--print"),
    "deno": ("eval",), "bun": ("-e", "--eval"), "php": ("-r",), "lua": ("-e",),
    "luajit": ("-e",), "tclsh": (), "Rscript": ("-e",), "osascript": ("-e",),
    "jq": (), "sed": ("-e", "--expression"), "awk": (), "gawk": (), "mawk": (), "nawk": (),
}
# Programs that pass their arguments on to a shell that ocrwatch cannot see (a remote
# one, another user's login shell, a shell started later by a terminal).
RELAYS = frozenset({"ssh", "su", "runuser", "watch", "xterm", "gnome-terminal",
                    "konsole", "tmux", "screen", "systemd-run", "pkexec"})
# Wrappers whose own -c option takes a POSIX shell command string.
SHELL_C_WRAPPERS = frozenset({"flock", "script"})
# Options of POSIX shells that take the next argument as their value.
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})

_INSTEAD = ('write the value as its own argument after the script (["/bin/sh", "-c", '
            '\'notify "$1"\', "sh", "{file}"]) or use the environment ("$OCRWATCH_FILE", '
            '"$OCRWATCH_MD"...)')


class HookRefused(ConfigError):
    """An ``on_done`` form in which a placeholder's value could be read as code."""


def program_name(arg: str) -> str:
    """``/usr/bin/python3.12`` -> ``python``; ``bash5`` -> ``bash``."""
    name = os.path.basename(arg)
    if name == "Rscript":
        return name
    return re.sub(r"[\d.]+$", "", name.lower()) or name.lower()


def _quote_posix(script: str, value_of: Callable[[str], str]) -> str:
    """``script`` with each placeholder replaced by its value, quoted for where it sits.

    A small scanner follows the shell's quoting: a stack of contexts, each one of
    ``out`` (plain words), ``sq`` ('...'), ``dq`` ("..."), ``cs`` ($(...), counting
    parentheses), ``bt`` (`...`), ``pe`` (${...}) and ``ar`` ($((...))). A value is
    emitted so that it ends up as one literal word in each context; where that cannot be
    done, HookRefused."""
    out: list[str] = []
    stack: list[list[object]] = [["out", 0]]
    comment = False
    i, n = 0, len(script)
    if PLACEHOLDER.search(script) and re.search(r"<<", script):
        raise HookRefused("a placeholder in a shell command string that holds a "
                          "here-document (<<) cannot be quoted: the here-document's body "
                          f"expands $(...) inside quotes; {_INSTEAD}")

    def word_start() -> bool:
        return i == 0 or script[i - 1] in " \t\n;&|()<>"

    while i < n:
        match = PLACEHOLDER.match(script, i)
        top = str(stack[-1][0])
        if match is not None:
            if comment:
                raise HookRefused(f"a placeholder in a comment of a shell command string "
                                  f"ends the comment at a newline in a file name; {_INSTEAD}")
            if top in ("pe", "ar"):
                raise HookRefused("a placeholder inside ${...} or $((...)) of a shell "
                                  f"command string cannot be quoted; {_INSTEAD}")
            quoted = shlex.quote(value_of(match.group(0)))
            quoted = {"sq": f"'{quoted}'", "dq": f'"{quoted}"'}.get(top, quoted)
            backquotes = sum(1 for c in stack if c[0] == "bt")
            if backquotes > 1:
                raise HookRefused("a placeholder inside nested backquotes of a shell "
                                  f"command string cannot be quoted; {_INSTEAD}")
            if backquotes:
                # The shell finds the closing ` before it reads quotes: \ \` \$ first.
                quoted = re.sub(r"([\\`$])", r"\\\1", quoted)
            out.append(quoted)
            i = match.end()
            continue
        ch = script[i]
        nxt = script[i + 1] if i + 1 < n else ""
        if comment:
            comment = ch != "\n"
            out.append(ch)
            i += 1
            continue
        step = 1
        if top == "sq":
            if ch == "'":
                stack.pop()
        elif ch == "\\":
            step = 2  # the next character is taken as it is
        elif (top, ch) in (("dq", '"'), ("bt", "`"), ("pe", "}")):
            stack.pop()
        elif ch == "$" and script.startswith("((", i + 1):
            stack.append(["ar", 0])
            step = 3
        elif ch == "$" and nxt == "(":
            stack.append(["cs", 0])
            step = 2
        elif ch == "$" and nxt == "{":
            stack.append(["pe", 0])
            step = 2
        elif ch == "`":
            stack.append(["bt", 0])
        elif top == "ar":
            if ch == "(":
                stack[-1][1] = int(str(stack[-1][1])) + 1
            elif ch == ")":
                if int(str(stack[-1][1])) == 0:
                    stack.pop()
                    step = 2  # "))"
                else:
                    stack[-1][1] = int(str(stack[-1][1])) - 1
        elif top in ("out", "cs", "bt", "pe"):
            if ch == "'":
                stack.append(["sq", 0])
            elif ch == '"':
                stack.append(["dq", 0])
            elif ch == "#" and top != "pe" and word_start():
                comment = True
            elif top == "cs" and ch == "(":
                stack[-1][1] = int(str(stack[-1][1])) + 1
            elif top == "cs" and ch == ")":
                if int(str(stack[-1][1])) == 0:
                    stack.pop()
                else:
                    stack[-1][1] = int(str(stack[-1][1])) - 1
        out.append(script[i:i + step])
        i += step
    return "".join(out)


def _refuse_code(program: str, arg: str) -> None:
    if PLACEHOLDER.search(arg):
        raise HookRefused(f"a placeholder in the code that on_done hands to {program} "
                          "would be read as code if a file name holds quotes; pass it as "
                          f"its own argument instead ({program} reads it from its "
                          "arguments or the environment: OCRWATCH_FILE, OCRWATCH_MD...)")


def shell_safe(argv: list[str], value_of: Callable[[str], str]) -> list[str]:
    """``argv`` with placeholders replaced: plain arguments get the value as it is, shell
    command strings get it quoted; forms that cannot be made safe raise HookRefused."""
    result = [PLACEHOLDER.sub(lambda m: value_of(m.group(0)), a) for a in argv]
    i = 0
    while i < len(argv):
        name = program_name(argv[i])
        if name == "busybox" and i + 1 < len(argv):
            i += 1
            name = program_name(argv[i])
        if name in POSIX_SHELLS or name in OTHER_SHELLS:
            script = _shell_script_index(argv, i)
            if script is not None:
                if name in OTHER_SHELLS:
                    if PLACEHOLDER.search(argv[script]):
                        raise HookRefused(f"a placeholder in a {name} command string is not "
                                          f"quoted by ocrwatch ({name} does not quote as sh "
                                          f"does); use /bin/sh -c, or {_INSTEAD}")
                else:
                    result[script] = _quote_posix(argv[script], value_of)
                i = script + 1  # what follows are the script's own arguments
                continue
        elif name in SHELL_C_WRAPPERS:
            for j in range(i + 1, len(argv) - 1):
                if argv[j] in ("-c", "--command"):
                    result[j + 1] = _quote_posix(argv[j + 1], value_of)
        elif name in RELAYS:
            if any(PLACEHOLDER.search(a) for a in argv[i + 1:]):
                raise HookRefused(f"{name} hands its arguments to a shell that ocrwatch "
                                  "cannot quote for (a remote or another user's shell); "
                                  "on_done must not put a placeholder after it; run a "
                                  "local script that reads OCRWATCH_FILE instead")
        elif name == "env":
            split = any(a in ("-S", "--split-string") or a.startswith(("--split-string=", "-S"))
                        for a in argv[i + 1:])
            if split and any(PLACEHOLDER.search(b) for b in argv[i + 1:]):
                raise HookRefused("env -S splits its string into words: a file name with "
                                  f"spaces or quotes would become other arguments; {_INSTEAD}")
        elif name in INTERPRETERS:
            _interpreter(argv, i, name)
        i += 1
    return result


def _shell_script_index(argv: list[str], i: int) -> int | None:
    """Where the command string of the shell at ``argv[i]`` is, or None (no -c)."""
    has_c = False
    j = i + 1
    while j < len(argv):
        arg = argv[j]
        if arg in _SHELL_VALUE_OPTIONS:
            j += 2
            continue
        if arg in ("-c", "--command", "-Command") or (
                len(arg) > 1 and arg[0] in "-+" and not arg.startswith("--")
                and "c" in arg[1:]):
            has_c = True
            j += 1
            continue
        if arg == "--":
            j += 1
            break
        if arg.startswith(("-", "+")) and arg not in ("-", "+"):
            j += 1
            continue
        break
    return j if has_c and j < len(argv) else None


def _interpreter(argv: list[str], i: int, name: str) -> None:
    flags = INTERPRETERS[name]
    if name in ("awk", "gawk", "mawk", "nawk", "jq", "tclsh", "sed"):
        # The first operand is the program (unless -f/-e names it elsewhere).
        j = i + 1
        while j < len(argv) and argv[j].startswith("-") and argv[j] != "-":
            if argv[j] in ("-f", "--file", "--from-file"):
                return
            if argv[j] in ("-e", "--expression") and j + 1 < len(argv):
                _refuse_code(name, argv[j + 1])
                return
            j += {"-v": 2, "-F": 2, "--arg": 3, "--argjson": 3}.get(argv[j], 1)
        if j < len(argv) and name != "tclsh":
            _refuse_code(name, argv[j])
        return
    for j in range(i + 1, len(argv)):
        arg = argv[j]
        if j + 1 < len(argv) and (arg in flags or (
                name in ("python", "pypy") and arg.startswith("-")
                and not arg.startswith("--") and arg.endswith("c"))):
            _refuse_code(name, argv[j + 1])
        elif any(arg.startswith(f + "=") for f in flags if f.startswith("--")):
            _refuse_code(name, arg)


def check(argv: list[str]) -> str | None:
    """Why ``argv`` cannot be an ``on_done`` (for the config check), or None."""
    try:
        shell_safe(argv, lambda _p: "/x")
    except HookRefused as exc:
        return str(exc)
    return None
