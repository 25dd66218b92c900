"""A config file holding remote.api_key that group or others can read gets a warning from
``ocrwatch doctor`` and at every start of the daemon; at 0600 it gets none."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from .helpers import DaemonProcess, Home, ocrwatch_cli

KEY = "sk-test-0123456789abcdef"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o600])
def test_a_readable_api_key_is_warned_about(home: Home, mode: int,
                                            daemon_process: Callable[..., DaemonProcess]
                                            ) -> None:
    config = home.root / "config.toml"
    config.write_text(f'[remote]\napi_key = "{KEY}"\n')
    os.chmod(config, mode)
    exposed = bool(mode & 0o066)
    doctor = ocrwatch_cli(home, "doctor", timeout=120, OCRWATCH_CONFIG=str(config))
    out = doctor.stdout + doctor.stderr
    assert KEY not in out  # the warning names the file, never the key
    assert (f"chmod 600 {config}" in out) is exposed, out
    if exposed:
        assert doctor.returncode != 0 and "remote.api_key" in out
    daemon = daemon_process(OCRWATCH_CONFIG=str(config))
    daemon.start()
    daemon.wait_ready()
    assert daemon.stop() == 0
    logs = daemon.output()
    assert KEY not in logs
    assert (f"{config} holds remote.api_key" in logs) is exposed, logs[-2000:]
