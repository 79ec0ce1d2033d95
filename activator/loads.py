"""Per-replica load from the exporters: `llm_kv_cache_usage_ratio` and `llm_requests_waiting` by
(model, pod), read every `exporters_interval` with the bounded GET (keda_llm.common.httpget) in a
worker thread, so a slow exporter never stalls the proxy's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from keda_llm.common.httpget import FetchError, fetch
from keda_llm.common.vocabulary import ENGINE_METRICS

log = logging.getLogger(__name__)

KV = "llm_kv_cache_usage_ratio"
WAITING = "llm_requests_waiting"
assert {KV, WAITING} <= {m.name for m in ENGINE_METRICS}  # the vocabulary is the contract
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class PodLoad:
    kv_usage: float | None
    waiting: float | None
    at: float  # when it was read (the clock of LoadTable)


def parse_loads(text: str) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """(model, pod) -> (kv usage, waiting) from one exporter's exposition text."""
    out: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (KV, WAITING):
            continue
        for s in family.samples:
            if s.name != family.name or not math.isfinite(s.value) or s.value < 0:
                continue  # NaN, infinite or negative is not reported: one such load would win (or lose) every route
            key = (s.labels.get("model", ""), s.labels.get("pod", ""))
            kv, waiting = out.get(key, (None, None))
            out[key] = (s.value, waiting) if family.name == KV else (kv, s.value)
    return out


class LoadTable:
    """The newest load per (model, pod), and the loop that fills it from the exporters."""

    def __init__(self, urls: Sequence[str], *, max_age: float, timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.urls = list(urls)
        self.max_age = max_age
        self.timeout = timeout
        self._clock = clock
        self._loads: dict[tuple[str, str], PodLoad] = {}
        self.errors = 0

    def get(self, model: str, pod: str) -> PodLoad | None:
        """The fresh load of one replica, or None (unknown, or older than max_age)."""
        if not pod:
            return None
        load = self._loads.get((model, pod))
        return load if load is not None and self._clock() - load.at <= self.max_age else None

    def update(self, text: str) -> None:
        now = self._clock()
        for key, (kv, waiting) in parse_loads(text).items():
            self._loads[key] = PodLoad(kv, waiting, now)

    def _read(self, url: str) -> str:
        _, body = fetch(url, timeout=self.timeout, max_bytes=MAX_BODY, accept_gzip=True)
        return body.decode("utf-8", "replace")

    async def poll_once(self) -> None:
        results = await asyncio.gather(*(asyncio.to_thread(self._read_parsed, u) for u in self.urls))
        now = self._clock()
        for parsed in results:
            if parsed is None:
                continue
            for key, (kv, waiting) in parsed.items():
                self._loads[key] = PodLoad(kv, waiting, now)
        for key in [k for k, v in self._loads.items() if now - v.at > 10 * self.max_age]:
            del self._loads[key]  # pods long gone

    def _read_parsed(self, url: str) -> dict[tuple[str, str], tuple[float | None, float | None]] | None:
        try:
            return parse_loads(self._read(url))
        except (FetchError, ValueError) as e:  # a bad exporter: its pods' loads age out, routing falls back
            self.errors += 1
            log.debug("exporter %s: %s", url, e)
            return None

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.poll_once()
            except Exception:  # the loop must not die: routing would read ever older loads, then none
                self.errors += 1
                log.exception("reading the exporters' loads failed; trying again in %gs", interval)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
