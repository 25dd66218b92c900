"""Control of a running daemon: a local socket, the per-user lock, and their clients.

:mod:`~ocrwatch.control.protocol` (the lines and their answers),
:mod:`~ocrwatch.control.server`, :mod:`~ocrwatch.control.client` and
:mod:`~ocrwatch.control.lock`.

The daemon listens on a Unix socket inside the per-user runtime folder (0700), the socket
itself 0600, so only its user can talk to it. The protocol is one JSON object per line:
a request ``{"cmd": "pause"}`` (or ``{"cmd": "retry", "paths": [...], "all_failed": false}``)
is answered by ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.
``ocrwatch status | pause | resume | stop | rescan | retry`` are thin clients of it.

One daemon per user: :class:`InstanceLock` holds an ``flock`` on a file in the same folder
for the daemon's lifetime. The kernel drops the lock when the process dies, so a crash
never leaves a stale lock behind (unlike a PID file alone).
"""
