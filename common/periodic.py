"""The one periodic worker: run a step every interval on a daemon thread until stopped.

Every background loop in the project is this (the exporter's collection and discovery, the scaler's
sources, its Kubernetes reader and its decision refresher), so they share one timing rule:
- fixed rate: the pause after a step is the interval less the step's own time, so a period does not
  drift by the step's duration;
- an overrun skips the ticks it missed and waits a whole interval after it, rather than running steps
  back to back against a target that is already slow;
- a step that raises is logged and the loop goes on: one bad cycle must not stop the next.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Runs `step` every `interval_s` seconds on a daemon thread named `name`, from `start()` to `stop()`.

    `first_now`: the first step runs at once (a collector's first cycle) or after one interval (a
    refresher whose first input is not there yet)."""

    def __init__(self, name: str, interval_s: float, step: Callable[[], object], *, first_now: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not interval_s > 0:  # also refuses NaN
            raise ValueError(f"{name}: interval must be > 0 s, got {interval_s!r}")
        self.name = name
        self.interval_s = float(interval_s)
        self._step = step
        self._first_now = first_now
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (a second call while running does nothing)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the loop to end and wait up to `timeout_s` for a step in progress to finish."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _run(self) -> None:
        next_at = self._clock() + (0.0 if self._first_now else self.interval_s)
        while not self._stop.wait(max(0.0, next_at - self._clock())):
            try:
                self._step()
            except Exception:
                log.exception("%s: step failed", self.name)
            next_at += self.interval_s
            now = self._clock()
            if next_at < now:  # overran: skip the missed ticks
                next_at = now + self.interval_s
