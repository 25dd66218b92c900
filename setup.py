"""One build step beyond pyproject.toml: the login-start templates go into the wheel.

Their single copy is ``packaging/`` (where distributions look for them); the wheel carries
them as package data in ``ocrwatch/data/``, where ``ocrwatch autostart`` reads them. A
checkout (an editable install) reads ``packaging/`` itself.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATES = ("ocrwatch.service", "ocrwatch.desktop", "org.ocrwatch.daemon.plist")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the checkout's packaging/ is read in place
            return
        target = Path(self.build_lib) / "ocrwatch" / "data"
        self.mkpath(str(target))
        for name in TEMPLATES:
            self.copy_file(str(Path("packaging") / name), str(target / name))


setup(cmdclass={"build_py": BuildPy})
