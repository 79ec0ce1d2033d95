"""`POST /v1/warm`: read a model's weight files into this node's page cache before its pod starts.

A cold start is node + image + weights + engine init; the weights phase is bytes over storage bandwidth
(about 1 GiB/s from a network disk against about 5 GiB/s from the page cache, see
docs/simulator.md's cold-start phases). The exporter runs on every GPU node already, so the scaler can
ask the nodes likely to get the next pod to read the files now, and the pod's loader then finds them
in memory.

What it will read is narrow by construction:
- only below the configured directories, judged on the fully resolved path: `..` components are
  refused outright and a symlink (of the path or of any file below it) that leads outside is refused;
- at most `max_bytes` per request and `max_concurrent` requests at once (429 past that);
- only with the bearer token from `token_file` (compared in constant time; re-read when the file
  changes, so a rotated Secret needs no restart). No token file configured: the endpoint is off.
Reading is sequential in chunks into one reused buffer, with POSIX_FADV_SEQUENTIAL, so a warm costs
one buffer of memory whatever the model's size.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIB = 1024**3


@dataclass(frozen=True)
class WarmConfig:
    """The `warm:` block of the exporter config. No directories: POST /v1/warm answers 404."""

    directories: tuple[str, ...] = ()
    token_file: str = ""
    max_bytes: int = 1024 * GIB
    max_concurrent: int = 2
    chunk_bytes: int = 8 * 1024 * 1024

    @property
    def enabled(self) -> bool:
        return bool(self.directories)


class WarmError(Exception):
    """A refused warm request: `status` is the HTTP answer, the message says why (never a traceback)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class WarmJob:
    """One accepted request and how far it got."""

    id: int
    path: str
    files: int
    bytes_total: int
    started_at: float
    bytes_read: int = 0
    finished_at: float | None = None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        state = "running" if self.finished_at is None else ("failed" if self.error else "done")
        return {"id": self.id, "path": self.path, "files": self.files, "bytes": self.bytes_total,
                "bytes_read": self.bytes_read, "state": state, "error": self.error,
                "seconds": None if self.finished_at is None else round(self.finished_at - self.started_at, 3)}


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def plan(requested: str, directories: tuple[str, ...]) -> list[tuple[str, int]]:
    """The regular files to read for `requested` (a file or a folder) as (resolved path, size).

    Raises WarmError 400 for a malformed path, 403 for anything leading outside `directories`, 404 when
    nothing is there."""
    if not requested or "\x00" in requested or not os.path.isabs(requested):
        raise WarmError(400, f"path must be an absolute path, got {requested!r}")
    if ".." in Path(requested).parts:
        raise WarmError(403, f"path {requested!r} has a '..' component")
    roots = tuple(os.path.realpath(d) for d in directories)
    real = os.path.realpath(requested)
    if not _inside(real, roots):
        raise WarmError(403, f"path {requested!r} is outside the configured warm directories")
    if not os.path.exists(real):
        raise WarmError(404, f"path {requested!r} does not exist")
    if os.path.isfile(real):
        return [(real, os.path.getsize(real))]
    files: list[tuple[str, int]] = []
    for folder, dirs, names in os.walk(real, followlinks=False):
        for name in sorted(dirs):  # a linked folder is not walked; refuse one that leads out
            linked = os.path.join(folder, name)
            if os.path.islink(linked) and not _inside(os.path.realpath(linked), roots):
                raise WarmError(403, f"{linked!r} links outside the configured warm directories")
        for name in sorted(names):
            entry = os.path.join(folder, name)
            target = os.path.realpath(entry)
            if not _inside(target, roots):
                raise WarmError(403, f"{entry!r} links outside the configured warm directories")
            if os.path.isfile(target):
                files.append((target, os.path.getsize(target)))
    return files


def read_into_cache(path: str, buffer: bytearray, progress: Callable[[int], None]) -> int:
    """Read `path` start to end into `buffer` (reused), telling `progress` each chunk's size."""
    total = 0
    view = memoryview(buffer)
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            n = os.readv(fd, [view])
            if n <= 0:
                return total
            total += n
            progress(n)
    finally:
        os.close(fd)


@dataclass
class Warmer:
    """Accepts warm requests (auth, path rules, bounds) and reads them on background threads."""

    config: WarmConfig
    clock: Callable[[], float] = time.time
    reader: Callable[[str, bytearray, Callable[[int], None]], int] = read_into_cache
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: int = 0
    _next_id: int = 1
    _jobs: deque[WarmJob] = field(default_factory=lambda: deque(maxlen=64))
    _token: tuple[float, bytes] | None = None
    bytes_read_total: int = 0

    def _expected_token(self) -> bytes:
        path = self.config.token_file
        if not path:
            raise WarmError(503, "warm is on but no token_file is configured: refusing every request")
        try:
            mtime = os.stat(path).st_mtime
            if self._token is None or self._token[0] != mtime:
                self._token = (mtime, Path(path).read_bytes().strip())
        except OSError as err:
            raise WarmError(503, f"cannot read the warm token file: {err.strerror}") from None
        return self._token[1]

    def authorize(self, header: str | None) -> None:
        """Raises WarmError 401 unless `header` is `Bearer <the token>` (constant-time comparison)."""
        expected = self._expected_token()
        if not expected:
            raise WarmError(503, "the warm token file is empty: refusing every request")
        given = (header or "").encode()
        if not hmac.compare_digest(given, b"Bearer " + expected):
            raise WarmError(401, "missing or wrong bearer token for /v1/warm")

    def submit(self, authorization: str | None, requested: object) -> WarmJob:
        """Check and start one warm; returns the job (reading goes on in a thread)."""
        if not self.config.enabled:
            raise WarmError(404, "warm is not configured on this exporter (warm.directories)")
        self.authorize(authorization)
        if not isinstance(requested, str):
            raise WarmError(400, f"body must be JSON {{\"path\": \"/models/...\"}}, got path {requested!r}")
        files = plan(requested, self.config.directories)
        total = sum(size for _, size in files)
        if total > self.config.max_bytes:
            raise WarmError(413, f"{requested!r} holds {total} bytes, over warm.max_bytes ({self.config.max_bytes})")
        with self._lock:
            if self._running >= self.config.max_concurrent:
                raise WarmError(429, f"{self._running} warms already running (warm.max_concurrent)")
            self._running += 1
            job = WarmJob(self._next_id, requested, len(files), total, self.clock())
            self._next_id += 1
            self._jobs.append(job)
        threading.Thread(target=self._run, args=(job, files), name=f"warm-{job.id}", daemon=True).start()
        return job

    def _run(self, job: WarmJob, files: list[tuple[str, int]]) -> None:
        buffer = bytearray(self.config.chunk_bytes)

        def progress(n: int) -> None:
            job.bytes_read += n
            with self._lock:
                self.bytes_read_total += n

        try:
            for path, _ in files:
                self.reader(path, buffer, progress)
        except OSError as err:
            job.error = f"{err.filename or job.path}: {err.strerror}"
            log.warning("warm %s failed: %s", job.path, job.error)
        finally:
            job.finished_at = self.clock()
            with self._lock:
                self._running -= 1

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [job.as_json() for job in self._jobs]

    def wait(self, timeout_s: float = 30.0) -> bool:
        """For tests and shutdown: until no warm runs (True) or the timeout passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._running == 0:
                    return True
            time.sleep(0.01)
        return False
