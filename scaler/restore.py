"""Bring the long tiers back after a restart: from Prometheus where a source has one, else from the pod's
snapshot; and keep that snapshot written.

One worker per scaler (the assembly runs `step` on common/periodic.py's thread every few seconds, or
from `Sources.collect_once` in tests), off the RPC path: the range queries of a rebuild take
milliseconds to seconds and hold no lock; only the merge into the tier takes the history lock.

Each model is restored once, the first time a step finds its history (a model first seen after
start is rebuilt then, too). A rebuild that fails (Prometheus down) is retried every `retry_s`; the
model's long tier meanwhile holds what was seen live. Sources with a Prometheus (`metricsSource:
prometheus`, or `prometheusAddress`/`--prometheus-address` set) rebuild from it (scaler/backfill.py)
and are left out of the snapshot; the others read the snapshot (scaler/snapshot.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from keda_llm.scaler import snapshot
from keda_llm.scaler.backfill import rebuild
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.longhistory import MINUTE, decode, unpack
from keda_llm.scaler.service import HistoryStore
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.promql import PrometheusClient

log = logging.getLogger(__name__)


def _no_query(namespace: str, model: str) -> str | None:
    return None


class StoreRef(NamedTuple):
    """A source's store as the restorer sees it."""

    name: str  # the source's name (its snapshot entries carry it)
    prometheus: str  # the Prometheus it rebuilds from; "" for none (then the snapshot)
    store: HistoryStore
    upstream: Callable[[str, str], str | None] = _no_query  # (namespace, model) -> its activationQuery


class LongHistoryRestorer:
    """See the module docstring. `stores()` lists the sources' stores; `lock` is the history lock."""

    def __init__(self, stores: Callable[[], list[StoreRef]], lock: contextlib.AbstractContextManager[Any], *,
                 clock: Callable[[], float], history_dir: Path | None = None,
                 prometheus: Callable[[str], PrometheusClient] | None = None, retry_s: float = 30.0,
                 save_every_s: float = 300.0, max_bytes: int = snapshot.DEFAULT_MAX_BYTES) -> None:
        self._stores = stores
        self._lock = lock
        self._clock = clock
        self.history_dir = history_dir
        self._prometheus = prometheus or (lambda address: PrometheusClient(address, timeout_s=30.0))
        self._clients: dict[str, PrometheusClient] = {}
        self.retry_s = retry_s
        self.save_every_s = save_every_s
        self.max_bytes = max_bytes
        self._pending: dict[snapshot.EntryKey, snapshot.Entry] = {}
        self._file: tuple[int, int, int] | None = None  # the snapshot file as this pod last read or wrote it
        if history_dir is not None:
            snapshot.sweep_temporaries(history_dir, time.time())
            self._pending = self._unexpired(snapshot.load(history_dir), clock())
            self._file = _signature(history_dir)
        self._done: weakref.WeakSet[ModelHistory] = weakref.WeakSet()
        self._retry_at: weakref.WeakKeyDictionary[ModelHistory, float] = weakref.WeakKeyDictionary()
        self._last_save = clock()
        self.failures = 0  # rebuilds that failed (and will be retried)
        self._warned_shared = False
        self._stopping = threading.Event()

    def stop(self) -> None:
        """End a step in progress after the model it is rebuilding (a first start may rebuild hundreds)."""
        self._stopping.set()

    def step(self) -> int:
        """Restore every model not restored yet (skipping those waiting for a retry); save the snapshot when
        due. Returns how many models were restored."""
        now = self._clock()
        done = 0
        for source, prom, store, upstream in self._stores():
            for history in store.models():
                if self._stopping.is_set():
                    return done
                if history in self._done or self._retry_at.get(history, -math.inf) > now:
                    continue
                if self._restore(source, prom, history, now, upstream(history.namespace, history.model)):
                    self._done.add(history)
                    done += 1
        if self.history_dir is not None and now - self._last_save >= self.save_every_s:
            self.save()
        return done

    @staticmethod
    def _unexpired(entries: dict[snapshot.EntryKey, snapshot.Entry], now: float) -> dict[snapshot.EntryKey,
                                                                                          snapshot.Entry]:
        """Less the entries whose every minute is older than the long tier's span: none of them can land any
        more (a model no longer collected was carried from snapshot to snapshot for ever, 121 KB each)."""
        current = math.floor(now / MINUTE)
        return {k: e for k, e in entries.items() if e.head > current - len(e.words)}

    def _restore(self, source: str, prom: str, history: ModelHistory, now: float, upstream: str | None) -> bool:
        if prom:
            last = math.floor(now / MINUTE) - 1
            try:
                minutes, values = rebuild(self._client(prom), history.namespace, history.model,
                                          last - history.long.n + 1, last, upstream)
            except SourceError as err:
                self.failures += 1
                self._retry_at[history] = now + self.retry_s
                log.warning("long history of %s/%s: rebuild from Prometheus failed, retrying in %.0fs: %s",
                            history.namespace, history.model, self.retry_s, err)
                return False
        else:
            entry = self._pending.pop((source, history.namespace, history.model), None)
            if entry is None:
                return True  # nothing saved for it: its history starts now
            minutes, values = entry.minutes, decode(unpack(entry.words))
        with self._lock:
            landed = history.long.merge(minutes, values)
        log.info("long history of %s/%s: %d values restored from %s", history.namespace, history.model, landed,
                 "Prometheus" if prom else "the snapshot")
        return True

    def _client(self, address: str) -> PrometheusClient:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self._prometheus(address)
        return client

    def save(self) -> Path | None:
        """Write the snapshot of the sources without a Prometheus now (None: no --history-dir)."""
        if self.history_dir is None:
            return None
        now = self._last_save = self._clock()
        refs = [(ref.name, history) for ref in self._stores() if not ref.prometheus for history in ref.store.models()]
        refs.sort(key=lambda r: -(r[1].last_at or 0.0))  # most recently seen first: kept if the file is full
        # a model collected since the start whose saved entry the restorer has not merged yet (a stop within its
        # first step, or while it rebuilt other models from a slow Prometheus): merged now, a local merge (the
        # save wrote the live minutes alone, and the file lost the model's saved days)
        for source, history in refs:
            if history not in self._done and (source, history.namespace, history.model) in self._pending:
                self._restore(source, "", history, now, None)
                self._done.add(history)
        self._pending = self._unexpired(self._pending, now)
        self._adopt_other_writers(now)
        written: set[snapshot.EntryKey] = set()

        def entries() -> Iterator[snapshot.Entry]:
            for source, history in refs:
                with self._lock:  # one model at a time: collection waits for a 121 KB copy at most
                    minutes, words = history.long.export()
                if len(minutes):
                    written.add((source, history.namespace, history.model))
                    yield snapshot.Entry(source, history.namespace, history.model, int(minutes[-1]), words)
            # models read from the snapshot but not seen (yet) since the start are kept for the next start
            yield from (e for k, e in list(self._pending.items()) if k not in written)

        try:
            path = snapshot.save(self.history_dir, entries(), self.max_bytes)
        except OSError as err:
            log.warning("long history snapshot in %s not written: %s", self.history_dir, err)
            return None
        self._file = _signature(self.history_dir)
        return path

    def _adopt_other_writers(self, now: float) -> None:
        """The file changed since this pod last read or wrote it: another scaler saves to the same folder (a
        Deployment's pods on one volume). Its entries are read back, and for a model this pod does not collect
        the entry with the newest minute is kept: the pod KEDA does not call would otherwise overwrite the
        history the pod it calls keeps, with what it read at its start."""
        assert self.history_dir is not None
        if _signature(self.history_dir) == self._file:
            return
        theirs = self._unexpired(snapshot.load(self.history_dir), now)
        if not self._warned_shared:
            self._warned_shared = True
            log.warning("long history: another scaler writes %s too; each save keeps the newest entry of every "
                        "model (give each scaler pod a folder of its own, or a Prometheus, to keep them apart)",
                        self.history_dir)
        for key, entry in theirs.items():
            mine = self._pending.get(key)
            if mine is None or entry.head > mine.head:
                self._pending[key] = entry


def _signature(directory: Path) -> tuple[int, int, int] | None:
    """The snapshot file's (inode, size, mtime in ns), or None when there is none: what tells a save by another
    process from this one's own."""
    try:
        st = (directory / snapshot.FILENAME).stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
