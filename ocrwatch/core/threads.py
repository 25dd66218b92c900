"""One way to run the daemon's long-lived threads: start once, stop, join.

Every long-lived thread of the daemon (the page preparer, the readers, the settler, the
hooks runner, the control socket's threads, the search page's server) is a
:class:`Service`: ``start()`` once, ``stop()`` asks it to end and wakes it,
``join(timeout)`` waits and says whether it ended; ``close(timeout)`` does both. Its loop
checks :attr:`Service.stopping`; a service that sleeps on something other than
:meth:`Service.sleep` (a condition, a queue) wakes it in :meth:`Service.wake`. A
:class:`Loop` is a service made of one step run again and again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ocrwatch.core.errors import StateError

log = logging.getLogger(__name__)


class Service:
    """A named daemon thread running :meth:`run` until asked to stop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """The thread's work: loop until :attr:`stopping`."""
        raise NotImplementedError

    def wake(self) -> None:
        """Wake the thread from whatever it waits on (it then sees :attr:`stopping`)."""

    def start(self) -> None:
        if self._thread is not None:
            raise StateError(f"{self.name} was started already")
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop_requested.set()
        self.wake()

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as a stop is asked for."""
        return self._stop_requested.wait(seconds)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; False when it is still running."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def close(self, timeout: float | None = None) -> bool:
        """Stop and join; says in the log when the thread did not end in time."""
        self.stop()
        if self.join(timeout):
            return True
        log.warning("%s did not stop within %s s", self.name, timeout)
        return False

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _main(self) -> None:
        try:
            self.run()
        except Exception:
            # A service's loop handles its own errors; one that escapes is a bug, logged
            # with its trace rather than lost on a bare thread.
            log.exception("%s stopped on an unexpected error", self.name)


class Loop(Service):
    """A service that runs ``step`` again and again until stopped; ``wake`` wakes a step
    that waits on something of its own."""

    def __init__(self, name: str, step: Callable[[], None], wake: Callable[[], None], *,
                 error_pause: float = 1.0) -> None:
        super().__init__(name)
        self._step = step
        self._wake = wake
        self._error_pause = error_pause

    def wake(self) -> None:
        self._wake()

    def run(self) -> None:
        while not self.stopping:
            try:
                self._step()
            except Exception:
                # The loop must survive anything; a step handles its own expected errors.
                log.exception("unexpected error in %s", self.name)
                self.sleep(self._error_pause)
