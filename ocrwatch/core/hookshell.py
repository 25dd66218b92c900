"""Placeholders (``{file}``...) never become shell or interpreter code in ``on_done``.

``on_done`` is an argv list, so ``["notify", "{file}"]`` gives the program the path as
one argument whatever the file is called. A value put into code is another matter: in
``["/bin/sh", "-c", "notify {file}"]`` a file named ``a $(touch x).png`` would run
``touch``, and no quoting ocrwatch could add holds once the script parses the value again
(``eval``, ``trap``, a nested ``sh -c``, ``ssh host '...'``, a pipe into ``sh``). So a
placeholder is refused (:class:`HookRefused`, at config load) wherever a program reads it
as code: a shell's command string (any shell, also after ``flock -c``), an interpreter's
code (``python -c``, ``perl -e``/``-le``/``-ne``, ``node -pe``, an ``awk``/``sed``/``jq``
program), the script a shell or interpreter would run, anything after ``ssh``/``su``, and
``env -S``. The message shows the rewrite: the value as an argument after the script
(``"$1"``) or from the environment (``"$OCRWATCH_FILE"``). A hook with no placeholder gets
the path appended as its last argument, so that argument is checked the same way.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable

from ocrwatch.core.errors import ConfigError
from ocrwatch.core.naming import OUTPUT_NAMES

# {file}, {source}, then one for each output: {md}, {txt}, {pdf}, {hocr}, {alto}.
PLACEHOLDERS = ("{file}", "{source}", *(f"{{{o}}}" for o in OUTPUT_NAMES))
# One pass over each argument: a value put in (a file named "{md}.png") is never searched
# for placeholders again.
PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))
# The environment variable that holds each placeholder's value (hooks/runner.hook_env).
ENV_OF = {"{file}": "OCRWATCH_FILE", "{source}": "OCRWATCH_SOURCE",
          **{f"{{{o}}}": f"OCRWATCH_{o.upper()}" for o in OUTPUT_NAMES}}

POSIX_SHELLS = frozenset({"sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "ksh93",
                          "mksh", "lksh", "pdksh", "oksh", "yash", "posh", "hush"})
OTHER_SHELLS = frozenset({"fish", "csh", "tcsh", "nu", "pwsh", "powershell", "xonsh",
                          "elvish", "rc", "es", "ion", "cmd"})
# Interpreters: the short option letters and long options after which code comes (the
# code is the rest of the cluster, "-e'print'", or the next argument: "-le", "-pe").
INTERPRETERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "python": ("c", ()), "pypy": ("c", ()), "perl": ("eE", ()), "ruby": ("e", ()),
    "node": ("ep", ("--eval", "--print")), "nodejs": ("ep", ("--eval", "--print")),
    "deno": ("", ("eval",)), "bun": ("e", ("--eval", "--print")), "php": ("rBRFE", ()),
    "lua": ("e", ()), "luajit": ("e", ()), "tclsh": ("", ()), "Rscript": ("e", ()),
    "osascript": ("e", ()), "jq": ("", ()), "sed": ("e", ("--expression",)),
    "awk": ("", ("--source",)), "gawk": ("e", ("--source",)), "mawk": ("", ()),
    "nawk": ("", ()), "busybox": ("", ()),
}
# Their short options whose value is the next argument (not code, not the script).
_VALUE_LETTERS = {"python": "WXQm", "pypy": "WXQm", "ruby": "IrCE", "node": "r",
                  "nodejs": "r", "awk": "vF", "gawk": "vFf", "mawk": "vFf", "nawk": "vFf",
                  "jq": "f", "sed": "f", "php": "cdfz"}
# Interpreters whose first operand is their program (unless -f/-e names it elsewhere).
_PROGRAM_FIRST = frozenset({"awk", "gawk", "mawk", "nawk", "jq", "sed"})
# Programs that pass their arguments on to a shell that ocrwatch cannot see (a remote
# one, another user's login shell, a shell started later by a terminal).
RELAYS = frozenset({"ssh", "su", "runuser", "watch", "xterm", "gnome-terminal",
                    "konsole", "tmux", "screen", "systemd-run", "pkexec", "parallel", "at"})
# Wrappers whose own -c option takes a shell command string.
SHELL_C_WRAPPERS = frozenset({"flock", "script"})
# Options of POSIX shells that take the next argument as their value.
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})

_INSTEAD = ('pass the value as its own argument after the script (["/bin/sh", "-c", '
            '\'notify "$1"\', "sh", "{file}"]) or read it from the environment '
            '("$OCRWATCH_FILE", "$OCRWATCH_MD"...), and never let the script parse it '
            'again (eval, sh -c, ssh)')


class HookRefused(ConfigError):
    """An ``on_done`` form in which a placeholder's value could be read as code."""


def program_name(arg: str) -> str:
    """``/usr/bin/python3.12`` -> ``python``; ``bash5`` -> ``bash``."""
    name = os.path.basename(arg)
    if name == "Rscript":
        return name
    return re.sub(r"[\d.]+$", "", name.lower()) or name.lower()


def _quote_posix(script: str, value_of: Callable[[str], str],
                 quote: Callable[[str], str] = shlex.quote) -> str:
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
            quoted = quote(value_of(match.group(0)))
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


def _env_form(script: str) -> str | None:
    """``script`` with each placeholder replaced by ``"$OCRWATCH_..."`` where it stands
    (for the message's rewrite), or None where the scanner finds no safe place."""
    try:
        return _quote_posix(script, lambda p: p, lambda p: f'"${ENV_OF[p]}"')
    except HookRefused:
        return None


def _refuse_script(argv: list[str], index: int, program: str) -> None:
    script = argv[index]
    if not PLACEHOLDER.search(script):
        return
    rewrite = _env_form(script) if program in POSIX_SHELLS | SHELL_C_WRAPPERS else None
    if rewrite is not None:
        fixed = [*argv[:index], rewrite, *argv[index + 1:]]
        way = f"write it as {json.dumps(fixed)}, or {_INSTEAD}"
    else:
        way = _INSTEAD
    raise HookRefused(f"a placeholder inside the command string that on_done hands to "
                      f"{program} would become shell code, and no quoting holds once the "
                      f"script parses it again (eval, sh -c, ssh); {way}")


def _refuse_code(program: str, arg: str, what: str = "code") -> None:
    if PLACEHOLDER.search(arg):
        raise HookRefused(f"a placeholder in the {what} that on_done hands to {program} "
                          "would be read as code if a file name holds quotes; pass it as "
                          f"its own argument after the code instead ({program} reads it "
                          "from its arguments, or from the environment: OCRWATCH_FILE, "
                          "OCRWATCH_MD...)")


def shell_safe(argv: list[str], value_of: Callable[[str], str]) -> list[str]:
    """``argv`` with each placeholder replaced by its value, as a plain argument; a form
    in which a value would be read as code raises HookRefused."""
    refuse_code_forms(argv)
    return [PLACEHOLDER.sub(lambda m: value_of(m.group(0)), a) for a in argv]


def refuse_code_forms(argv: list[str]) -> None:
    """Raise HookRefused where a placeholder in ``argv`` stands in code."""
    if not any(PLACEHOLDER.search(a) for a in argv):
        return
    i = 0
    while i < len(argv):
        name = program_name(argv[i])
        if name in POSIX_SHELLS or name in OTHER_SHELLS:
            script = _shell_script_index(argv, i)
            if script is not None:
                _refuse_script(argv, script, name)
                return  # what follows are the script's own arguments ($0, $1...)
            operand = _shell_operand_index(argv, i)
            if operand is not None:
                _refuse_code(name, argv[operand], "script file")
                return
        elif name in SHELL_C_WRAPPERS:
            for j in range(i + 1, len(argv) - 1):
                if argv[j] in ("-c", "--command"):
                    _refuse_script(argv, j + 1, name)
        elif name in RELAYS:
            if any(PLACEHOLDER.search(a) for a in argv[i + 1:]):
                raise HookRefused(f"{name} hands its arguments to a shell or a command "
                                  "line that ocrwatch cannot see (a remote or another "
                                  "user's shell); on_done must not put a placeholder after "
                                  "it; run a local script that reads OCRWATCH_FILE instead")
        elif name == "env":
            split = any(a in ("-S", "--split-string") or a.startswith(("--split-string=", "-S"))
                        for a in argv[i + 1:])
            if split and any(PLACEHOLDER.search(b) for b in argv[i + 1:]):
                raise HookRefused("env -S splits its string into words: a file name with "
                                  f"spaces or quotes would become other arguments; {_INSTEAD}")
        elif name in INTERPRETERS and name != "busybox" and _interpreter(argv, i, name):
            return
        i += 1


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


def _shell_operand_index(argv: list[str], i: int) -> int | None:
    """The script file a shell at ``argv[i]`` without -c would run, or None (-s: stdin)."""
    j = i + 1
    while j < len(argv):
        arg = argv[j]
        if arg in _SHELL_VALUE_OPTIONS:
            j += 2
        elif arg == "--":
            j += 1
            break
        elif arg.startswith(("-", "+")) and arg not in ("-", "+"):
            if arg.startswith("-") and not arg.startswith("--") and "s" in arg[1:]:
                return None
            j += 1
        else:
            break
    return j if j < len(argv) else None


def _interpreter(argv: list[str], i: int, name: str) -> bool:
    """Refuse a placeholder in the code of the interpreter at ``argv[i]``: the value of
    a code option anywhere in its arguments (clusters such as ``-le`` too), an option
    before its operands, and its first operand when that is its program or script.
    True when the operands are found (the rest are the program's own arguments)."""
    letters, longs = INTERPRETERS[name]
    values = _VALUE_LETTERS.get(name, "")
    code_given = False
    operand: int | None = None
    j = i + 1
    while j < len(argv):
        arg = argv[j]
        if operand is None and arg == "--":
            operand = j + 1
            break
        if arg in longs or (name == "deno" and arg == "eval"):
            if j + 1 < len(argv):
                _refuse_code(name, argv[j + 1])
            code_given = True
            j += 2
            continue
        if any(arg.startswith(f + "=") for f in longs if f.startswith("--")):
            _refuse_code(name, arg)
            code_given = True
            j += 1
            continue
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            step = 1
            for k, letter in enumerate(arg[1:], start=1):
                if letter in letters:
                    rest = arg[k + 1:]
                    if rest and all(c in letters for c in rest):
                        rest = ""  # node -pe: two code options, the code comes next
                    code = rest if rest else (argv[j + 1] if j + 1 < len(argv) else "")
                    _refuse_code(name, code)
                    _refuse_code(name, arg)
                    code_given = True
                    step = 1 if rest else 2
                    break
                if letter in values:
                    step = 1 if arg[k + 1:] else 2
                    if operand is None and j + 1 < len(argv) and step == 2:
                        _refuse_code(name, argv[j + 1], "option value")
                    break
            if operand is None:
                _refuse_code(name, arg, "option")
            j += step
            continue
        if arg.startswith("--"):
            if operand is None:
                _refuse_code(name, arg, "option")
            j += 1
            continue
        if operand is None:
            operand = j
        j += 1
    if operand is None or operand >= len(argv):
        return False
    if not code_given:
        files = any(a in ("-f", "--file", "--from-file") for a in argv[i + 1:operand])
        if name in _PROGRAM_FIRST and not files:
            _refuse_code(name, argv[operand], "program")
        elif name not in _PROGRAM_FIRST:
            _refuse_code(name, argv[operand], "script file")
    return True


def check(argv: list[str]) -> str | None:
    """Why ``argv`` cannot be an ``on_done`` (for the config check), or None. With no
    placeholder the path is appended as its last argument, so that is checked too."""
    if not any(PLACEHOLDER.search(a) for a in argv):
        argv = [*argv, "{file}"]
    try:
        refuse_code_forms(argv)
    except HookRefused as exc:
        return str(exc)
    return None
