"""Base of the broker's background threads (syncer, persister, refresher)."""

from __future__ import annotations

import threading


class Worker:
    """A condition, a stop flag and a daemon thread running :meth:`_run`.

    Subclasses call ``super().__init__(name)`` first, set up their state, then start the thread
    with ``self._thread.start()``; :meth:`_run` returns once ``_stopping`` is set.
    """

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def stop(self) -> None:
        """Ask the thread to finish and wait for it."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
