"""Build steps beyond pyproject.toml: the login-start templates and the build's name go
into the wheel, the man page into its data.

The templates' single copy is ``packaging/`` (where distributions look for them); the
wheel carries them as package data in ``ocrwatch/data/``, where ``ocrwatch autostart``
reads them. A checkout (an editable install) reads ``packaging/`` itself.

The build: ``git describe`` of the checkout, written to ``ocrwatch/_build.py`` in the
sdist and the wheel (``ocrwatch --version`` names it). A wheel made from an sdist keeps
the sdist's; without git, there is none and the version stands alone.

The man page ``packaging/ocrwatch.1`` (made from the parser: ``make man``) goes to
``share/man/man1`` of the install, where ``man`` and pipx find it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

TEMPLATES = ("ocrwatch.service", "ocrwatch.desktop", "org.ocrwatch.daemon.plist")
HERE = Path(__file__).resolve().parent


def _build_name() -> str:
    # ocrwatch/core/version.py alone (standard library): the package's own imports need
    # its dependencies, which a build environment does not have.
    spec = importlib.util.spec_from_file_location(
        "_ocrwatch_version", HERE / "ocrwatch" / "core" / "version.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.git_describe(HERE))


def _record_build(package_dir: Path) -> None:
    made = _build_name()
    if made:
        (package_dir / "_build.py").write_text(
            f'"""Written when this was built (setup.py): the build it comes from."""\n\n'
            f"BUILD = {made!r}\n", encoding="utf-8")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the checkout's packaging/ (and git) are read in place
            return
        target = Path(self.build_lib) / "ocrwatch" / "data"
        self.mkpath(str(target))
        for name in TEMPLATES:
            self.copy_file(str(Path("packaging") / name), str(target / name))
        _record_build(Path(self.build_lib) / "ocrwatch")


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _record_build(Path(base_dir) / "ocrwatch")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist},
      data_files=[("share/man/man1", ["packaging/ocrwatch.1"])])
