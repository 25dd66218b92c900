"""What a command line start costs: CPU seconds (user + system) of one ``ocrwatch``
process, this checkout against an earlier one, with plain ``python -c pass`` as the floor.

Each command runs ``--runs`` times (default 10), the two checkouts and the floor taken in
turn so that a busy machine weighs on all alike; the figure is the median of the child's
own user + system CPU time (``os.wait4``), wall time beside it. Every run has a fresh,
private HOME (no daemon runs: ``status`` answers from the index; ``search`` searches an
empty one). The earlier checkout is exported with ``git archive`` (default: the commit
before the registry filled itself on first use). Then, with ``python -X importtime``,
which ocrwatch engine modules each command has imported when it ends, and with
``python -X importtime`` what importing the engine registry costs.

    python benchmarks/cli_start.py                     # ~1 min on 2 cores
    python benchmarks/cli_start.py --before 250772f --runs 20
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks._common import header, median, save  # noqa: E402

BEFORE = "250772f"  # the last commit before the engine registry filled itself on first use

# name, arguments after the interpreter
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("python -c pass", ("-c", "pass")),
    ("ocrwatch --version", ("-m", "ocrwatch", "--version")),
    ("ocrwatch status", ("-m", "ocrwatch", "status")),
    ("ocrwatch search x", ("-m", "ocrwatch", "search", "x")),
    ("script: config.load()", ("-c", "from ocrwatch.config import load; load()")),
)
# Modules that only an engine needs: the engines' own and the remote engine's HTTP client.
ENGINE_MODULE = re.compile(r"^(ocrwatch\.engines\.(?!base$|gpu$|registry$)\S+|httpx)$")


def export(rev: str, into: Path) -> Path:
    """``rev``'s ``ocrwatch`` package, written under ``into`` (no worktree is made)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev,
                              "ocrwatch"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def environment(home: Path, tree: Path) -> dict[str, str]:
    """A private HOME with its XDG folders, the given checkout first on the path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OCRWATCH_", "XDG_", "PYTHON"))}
    folders = {"XDG_CONFIG_HOME": ".config", "XDG_DATA_HOME": ".local/share",
               "XDG_CACHE_HOME": ".cache", "XDG_STATE_HOME": ".local/state",
               "XDG_RUNTIME_DIR": "run"}
    for key, sub in folders.items():
        (home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        env[key] = str(home / sub)
    env.update(HOME=str(home), PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="")
    return env


def make_index(env: dict[str, str]) -> None:
    """An empty index where the default config looks, so that ``search`` searches."""
    code = ("from ocrwatch.config import schema; from ocrwatch.store.db import Database; "
            "Database(schema.Config().database).close()")
    subprocess.run([sys.executable, "-c", code], env={**env, "OCRWATCH_TESTING": "1"},
                   check=True, capture_output=True)


def cpu_run(args: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """CPU seconds (user + system) and wall seconds of one run, and its exit status."""
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, wall, proc.returncode


# Runs a command as ``python ARGS`` would, then writes the modules it imported to a file.
_PROBE = """
import runpy, sys
out, args = sys.argv[1], sys.argv[2:]
try:
    if args[0] == "-c":
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    with open(out, "w") as fh:
        fh.write("\\n".join(sorted(sys.modules)))
"""


def engine_modules(args: Sequence[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The engine-only modules (``ENGINE_MODULE``) a command has imported when it ends."""
    out = cwd / "modules.txt"
    subprocess.run([sys.executable, "-c", _PROBE, str(out), *args], env=env, cwd=cwd,
                   capture_output=True, check=False)
    return [m for m in out.read_text().splitlines() if ENGINE_MODULE.match(m)]


def registry_import(env: dict[str, str], cwd: Path, runs: int) -> float:
    """``python -X importtime``'s cumulative seconds for ``import ocrwatch.engines.registry``
    alone (after ``ocrwatch.config``, which every command imports), median of ``runs``."""
    code = "import ocrwatch.config; import ocrwatch.engines.registry"
    times = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env,
                              cwd=cwd, capture_output=True, text=True, check=True)
        found = [line for line in done.stderr.splitlines()
                 if line.rstrip().endswith("| ocrwatch.engines.registry")
                 or line.rstrip().endswith("| ocrwatch.engines")]
        times.append(sum(int(line.split("|")[1]) for line in found) / 1e6)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, help="the earlier commit (git rev)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, help="report file (default results/cli_start.txt)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cli_start-") as tmp:
        base = Path(tmp)
        trees = {"before": export(args.before, base / "before"), "after": ROOT}
        envs: dict[str, dict[str, str]] = {}
        for label, tree in trees.items():
            envs[label] = environment(base / f"home-{label}", tree)
            make_index(envs[label])
        cpu: dict[tuple[str, str], list[float]] = {}
        wall: dict[tuple[str, str], list[float]] = {}
        codes: dict[tuple[str, str], set[int]] = {}
        for _ in range(args.runs):
            for name, argv in COMMANDS:
                for label in trees:
                    if name.startswith("python") and label == "before":
                        continue  # the floor is the same interpreter either way
                    c, w, code = cpu_run(argv, envs[label], base)
                    cpu.setdefault((name, label), []).append(c)
                    wall.setdefault((name, label), []).append(w)
                    codes.setdefault((name, label), set()).add(code)
        imports = {(name, label): engine_modules(argv, envs[label], base)
                   for name, argv in COMMANDS if not name.startswith("python")
                   for label in trees}
        registry = {label: registry_import(envs[label], base, args.runs) for label in trees}

    floor = median(cpu[("python -c pass", "after")])
    lines = header("Command line start: CPU seconds (user + system) of one process", [
        f"median of {args.runs} runs each, taken in turn; before: git {args.before} "
        "(exported with git archive), after: this checkout",
        "above floor: the figure less `python -c pass`'s; exit: the statuses seen "
        "(status: 5 says no daemon runs; search: 1 says no matches; the script: 1 failed)",
        "engine modules: of ocrwatch.engines beyond base/gpu/registry, and httpx, in "
        "sys.modules when the command ends",
    ])
    lines.append(f"{'command':<24}{'checkout':>9}{'CPU s':>8}{'above floor':>13}"
                 f"{'wall s':>8}{'exit':>6}  engine modules")
    for name, _argv in COMMANDS:
        for label in ("before", "after"):
            if (name, label) not in cpu:
                continue
            c = median(cpu[(name, label)])
            extra = ""
            if (name, label) in imports:
                found = imports[(name, label)]
                shown = ", ".join(m.removeprefix("ocrwatch.engines.") for m in found[:3])
                extra = f"  {len(found):>3}" + (f" ({shown}{', ...' if len(found) > 3 else ''})"
                                                 if found else "")
            lines.append(
                f"{name:<24}{label if not name.startswith('python') else '':>9}{c:>8.3f}"
                f"{c - floor:>13.3f}{median(wall[(name, label)]):>8.3f}"
                f"{','.join(str(x) for x in sorted(codes[(name, label)])):>6}{extra}")
        if (name, "before") in cpu and (name, "after") in cpu:
            b, a = median(cpu[(name, "before")]), median(cpu[(name, "after")])
            lines.append(f"{'':<24}{'ratio':>9}{a / b:>8.2f}{(a - floor) / (b - floor):>13.2f}"
                         "   (after / before)")
    lines.append("")
    lines.append("python -X importtime, `import ocrwatch.engines.registry` after the config, "
                 f"cumulative, median of {args.runs}: before {registry['before']:.3f} s, "
                 f"after {registry['after']:.3f} s")
    print("\n".join(lines))
    print(f"saved {save('cli_start.txt', lines, args.out)}")


if __name__ == "__main__":
    main()
