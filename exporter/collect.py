"""Background collection: scrape every target concurrently on an interval, keep the last results.

The layers, from the edge inwards:
- `fetch`: one HTTP GET with a whole-answer deadline and a byte cap (a trickling engine is cut off
  at the deadline, a huge body at the cap, without reading the rest).
- `scrape`: fetch + decode + `exporter.engines.normalize`, every failure turned into a ScrapeError
  with a reason.
- `record`: pure; folds one scrape outcome into a target's state (up, last success, errors by
  reason, the cold-start measurement).
- `Collector`: runs cycles on a thread pool, renders the exposition once per cycle, and hands the
  last one to the HTTP server. A target that is still stuck from an earlier cycle is not started
  again, and the cycle waits at most its interval (the timeout + 0.5 s where the timeout fills the
  interval), so one bad engine delays nobody.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Protocol

from keda_llm.common.httpget import FetchError
from keda_llm.common.httpget import fetch as get
from keda_llm.common.periodic import Periodic
from keda_llm.exporter.config import ExporterConfig
from keda_llm.exporter.discovery import Discovery
from keda_llm.exporter.errors import REASONS, Reason, ScrapeError
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Target

log = logging.getLogger(__name__)

#: Body and target -> one EngineMetrics per model and role (exporter.engines.normalize). The adapters
#: already fill the model and the batch limit from the target where the body says none.
Normalize = Callable[[str, Target], list[EngineMetrics]]

#: Ask for the classic text format: engines built on prometheus_client add `_created` series and
#: exemplars to OpenMetrics answers, which cost parse time and tell us nothing.
ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
_HEADERS = {"Accept": ACCEPT, "User-Agent": "keda-llm-exporter"}
_SUCCESS = range(200, 300)


class GpuSource(Protocol):
    """What the collector needs from the NVML collector (exporter.nvml)."""

    def collect(self) -> list[GpuMetrics]: ...


def fetch(url: str, timeout: float, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> bytes:
    """GET `url`, all of it within `timeout` seconds (connect + headers + body) and at most `max_bytes`.

    keda_llm.common.httpget's fetch (shared with the scaler), its errors as ScrapeError. A refused status
    reads "HTTP <code>" and no more than the first line of the answer's text (`_refusal`), so a failing
    engine logs once, not once per changing body.
    """
    try:
        return get(url, timeout=timeout, max_bytes=max_bytes, headers=_HEADERS, ok_statuses=_SUCCESS, clock=clock)[1]
    except FetchError as e:
        raise ScrapeError(e.reason, _refusal(e) if e.status is not None else e.message) from e


#: At most this much of a refused answer's text goes into the error.
_SAID_CHARS = 200


def _refusal(e: FetchError) -> str:
    """"HTTP <code>", with what the answer says where its first line is readable text: an engine's own hint
    reaches the user (llama.cpp without `--metrics` answers 501 "... Start it with `--metrics`")."""
    said = _first_line(e.body_prefix)
    return f"HTTP {e.status}: {said}" if said else f"HTTP {e.status}"


def _first_line(prefix: bytes) -> str:
    """The first non-blank line of `prefix` (a JSON error's `message` in place of the JSON), at most
    _SAID_CHARS long; "" where it is not printable text."""
    lines = prefix.decode("utf-8", "replace").strip().splitlines()
    line = lines[0].strip().rstrip("\ufffd") if lines else ""  # a character cut at the prefix's end
    said = (_json_message(line) or line).strip().split("\n")[0][:_SAID_CHARS]
    return said if said.isprintable() and "\ufffd" not in said else ""


def _json_message(line: str) -> str | None:
    """`error.message` or `message` of a JSON error answer (llama.cpp's, OpenAI-style servers'), else None."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    for part in (data.get("error"), data) if isinstance(data, dict) else ():
        if isinstance(part, dict) and isinstance(part.get("message"), str):
            return str(part["message"])
    return None


def scrape(target: Target, cfg: ExporterConfig, normalize: Normalize) -> list[EngineMetrics]:
    """One target's normalized metrics, or a ScrapeError saying why not."""
    body = fetch(target.url, cfg.timeout, cfg.max_body_bytes)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScrapeError("parse", f"body is not UTF-8 at byte {e.start}") from e
    try:
        metrics = normalize(text, target)
    except ScrapeError:
        raise
    except Exception as e:  # an adapter bug must cost one target, not the exporter
        log.exception("normalizing %s failed", target.shown_url)
        raise ScrapeError("parse", f"{type(e).__name__}: {e}") from e
    if not metrics:
        raise ScrapeError("unknown_engine", "no engine series found in the body")
    return metrics


@dataclass(frozen=True)
class Outcome:
    """The result of one scrape: metrics on success, else the reason; finished at wall time `at`."""

    at: float
    duration: float
    metrics: tuple[EngineMetrics, ...] = ()
    error: ScrapeError | None = None


@dataclass(frozen=True)
class TargetState:
    """What the exporter knows about one target across cycles."""

    target: Target
    up: bool = False
    metrics: tuple[EngineMetrics, ...] = ()  # the current series; empty while down
    #: (model, engine, role) of each series at the last success: llm_engine_up and the last-success
    #: timestamp keep these labels while the target is down, so alerts see one continuous series.
    identities: tuple[tuple[str, str, str], ...] = ()
    last_success: float | None = None
    last_duration: float | None = None
    errors: dict[Reason, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    last_error: str = ""
    startup_seconds: float | None = None
    startup_done: bool = False  # measured (or found unmeasurable) for this container instance
    saw_not_ready: bool = False  # a failed scrape of this instance came before its first success

    def fallback_identity(self) -> tuple[str, str, str]:
        t = self.target
        return (t.model or "", t.engine or "", t.role or "unified")


def record(state: TargetState, target: Target, outcome: Outcome, exporter_start: float) -> TargetState:
    """Fold one outcome into a target's state. Pure.

    Cold start = first successful scrape - container start, measured once per container instance
    (a new `container_start` is a new instance). It is measured only when the exporter saw the
    engine come up: either a scrape of this instance failed first, or the container started after
    the exporter did. An exporter restarted next to an engine running for a day must not report a
    one-day cold start.
    """
    if target.container_start != state.target.container_start:
        state = replace(state, startup_seconds=None, startup_done=False, saw_not_ready=False)
    state = replace(state, target=target, last_duration=outcome.duration)
    if outcome.error is not None:
        errors = dict(state.errors)
        errors[outcome.error.reason] = errors.get(outcome.error.reason, 0) + 1
        return replace(state, up=False, metrics=(), errors=errors, last_error=str(outcome.error),
                       saw_not_ready=True)
    startup, done = state.startup_seconds, state.startup_done
    if not done:
        start = target.container_start
        if start is not None and (state.saw_not_ready or start >= exporter_start) and outcome.at >= start:
            startup = outcome.at - start
        done = True
    identities = tuple((m.model, m.engine, m.role) for m in outcome.metrics)
    return replace(state, up=True, metrics=outcome.metrics, identities=identities, last_success=outcome.at,
                   last_error="", startup_seconds=startup, startup_done=done)


@dataclass(frozen=True)
class Snapshot:
    """Everything one rendering needs: the state after a cycle."""

    node: str
    targets: tuple[TargetState, ...]
    gpus: tuple[GpuMetrics, ...]
    cycle_seconds: float | None
    discovery_errors: int
    at: float


class Collector:
    """Runs collection cycles and keeps the last rendered exposition.

    `render` turns a Snapshot into text; it is a parameter so the benchmark can compare renderers.
    """

    def __init__(
        self,
        cfg: ExporterConfig,
        discovery: Discovery,
        normalize: Normalize,
        render: Callable[[Snapshot], str],
        gpu_source: GpuSource | None = None,
        clock: Callable[[], float] = time.time,
        max_workers: int = 32,
    ) -> None:
        self.cfg = cfg
        self._discovery = discovery
        self._normalize = normalize
        self._render = render
        self._gpu_source = gpu_source
        self._clock = clock
        self._started_at = clock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="scrape")
        self._states: dict[str, TargetState] = {}
        self._in_flight: dict[str, Future[Outcome]] = {}
        self._gpu_future: Future[list[GpuMetrics]] | None = None
        self._gpu_fresh = False  # the NVML read in flight was started by this cycle (False: by an earlier one)
        self._gpus: tuple[GpuMetrics, ...] = ()
        self._lock = threading.Lock()
        self._body = b""
        self._gzipped: bytes | None = None
        self._last_cycle_at: float | None = None
        self._loops: list[Periodic] = []

    # -- one cycle -------------------------------------------------------------------------------

    def _scrape_one(self, target: Target) -> Outcome:
        t0 = time.perf_counter()
        try:
            metrics = scrape(target, self.cfg, self._normalize)
        except ScrapeError as e:
            return Outcome(at=self._clock(), duration=time.perf_counter() - t0, error=e)
        return Outcome(at=self._clock(), duration=time.perf_counter() - t0, metrics=tuple(metrics))

    def _forget(self, key: str) -> Callable[[Future[Outcome]], None]:
        def forget(_: Future[Outcome]) -> None:
            self._in_flight.pop(key, None)

        return forget

    def run_cycle(self) -> Snapshot:
        """Scrape every current target and the GPUs, update state, render; returns the snapshot."""
        t0 = time.perf_counter()
        targets = {t.key: t for t in self._discovery.targets()}
        started = self._start(targets)
        self._wait(started, t0)
        now = self._clock()
        # targets no longer discovered are forgotten, with all their series
        self._states = self._fold(targets, started, now, time.perf_counter() - t0)
        self._collect_gpus()
        snapshot = Snapshot(
            node=self.cfg.node_name,
            targets=tuple(self._states[k] for k in sorted(self._states)),
            gpus=self._gpus,
            cycle_seconds=time.perf_counter() - t0,
            discovery_errors=self._discovery.errors,
            at=now,
        )
        body = self._render(snapshot).encode()
        with self._lock:
            self._body, self._gzipped, self._last_cycle_at = body, None, now
        return snapshot

    def _start(self, targets: Mapping[str, Target]) -> dict[str, Future[Outcome]]:
        """Submit this cycle's scrapes, and an NVML read unless the last one is still running.

        A target still stuck from an earlier cycle is skipped, so a hung engine holds one thread, not one
        per cycle."""
        started: dict[str, Future[Outcome]] = {}
        for key, target in targets.items():
            if key in self._in_flight:
                continue
            fut = self._pool.submit(self._scrape_one, target)
            started[key] = self._in_flight[key] = fut
            fut.add_done_callback(self._forget(key))
        self._gpu_fresh = False
        if self._gpu_source is not None and self._gpu_future is None:
            self._gpu_future = self._pool.submit(self._gpu_source.collect)
            self._gpu_fresh = True
        return started

    def _wait(self, started: Mapping[str, Future[Outcome]], t0: float) -> None:
        """Engines get until the cycle's deadline; NVML the per-target timeout, not the whole interval."""
        cycle_deadline = t0 + max(self.cfg.interval, self.cfg.timeout + 0.5)
        wait(list(started.values()), timeout=max(0.0, cycle_deadline - time.perf_counter()))
        if self._gpu_future is not None:
            wait([self._gpu_future], timeout=max(0.0, t0 + self.cfg.timeout - time.perf_counter()))

    def _fold(self, targets: Mapping[str, Target], started: Mapping[str, Future[Outcome]], now: float,
              elapsed: float) -> dict[str, TargetState]:
        """Each target's new state; a scrape not finished (or not started: stuck) counts as a timeout."""
        states: dict[str, TargetState] = {}
        for key, target in targets.items():
            prev = self._states.get(key) or TargetState(target=target)
            done = started.get(key)
            if done is not None and done.done():
                outcome = done.result()
            else:
                outcome = Outcome(at=now, duration=elapsed,
                                  error=ScrapeError("timeout", "still running at the end of the cycle"))
            if outcome.error is not None and (prev.up or prev.last_error != str(outcome.error)):
                log.warning("scrape %s failed: %s", target.shown_url, outcome.error)
            states[key] = record(prev, target, outcome, self._started_at)
        return states

    def _collect_gpus(self) -> None:
        """The GPUs of this cycle. An NVML read that outlives its cycle keeps the last values for that one
        cycle (a slow read, not stall the engines' cycle); one still running when the next cycle starts
        reports every GPU down (`llm_gpu_up` 0, no values, the XIDs seen kept): NVML hangs when a GPU falls
        off the bus, and frozen values with `up` 1 hid exactly that."""
        fut = self._gpu_future
        if fut is None:
            return
        if not fut.done():
            if not self._gpu_fresh and any(g.up for g in self._gpus):
                log.warning("NVML read still running after a whole cycle: GPUs reported down until it returns")
                self._gpus = tuple(_down(g) for g in self._gpus)
            return
        self._gpu_future = None
        try:
            self._gpus = tuple(fut.result())
        except Exception:
            log.exception("GPU collection failed; no GPU series this cycle")
            self._gpus = ()

    # -- what the server reads ---------------------------------------------------------------------

    def exposition(self, gzipped: bool = False) -> bytes:
        """The last rendered cycle (gzip compressed once per cycle, on first demand)."""
        with self._lock:
            if not gzipped:
                return self._body
            if self._gzipped is None:
                self._gzipped = gzip.compress(self._body, compresslevel=5)
            return self._gzipped

    def healthy(self) -> bool:
        """A cycle completed within the last three intervals (plus one timeout, for a slow last cycle)."""
        with self._lock:
            last = self._last_cycle_at
        return last is not None and self._clock() - last <= 3 * self.cfg.interval + self.cfg.timeout

    # -- the background loops ----------------------------------------------------------------------

    def start(self) -> None:
        """Run discovery and collection in daemon threads until `stop()`."""
        if self._loops:
            return
        if self._discovery.kubernetes:
            self._discovery.refresh()  # the first cycle should already see the pods
            self._loops.append(Periodic("discover", self.cfg.kubernetes.refresh_interval, self._discovery.refresh,
                                        first_now=False))
        self._loops.append(Periodic("collect", self.cfg.interval, self.run_cycle))
        for loop in self._loops:
            loop.start()

    def refresh_discovery(self) -> None:
        """Re-read the Kubernetes pod list now (the loop does this every refresh_interval)."""
        self._discovery.refresh()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loops; scrapes still in flight end at their own deadline, in daemon threads."""
        for loop in self._loops:
            loop.stop(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        close = getattr(self._gpu_source, "close", None)
        if close is not None:
            close()


def _down(gpu: GpuMetrics) -> GpuMetrics:
    """`gpu` as a GPU NVML does not answer for: its identity, attribution and the XIDs seen, no values."""
    return GpuMetrics(index=gpu.index, uuid=gpu.uuid, gpu_model=gpu.gpu_model, up=False, mig_profile=gpu.mig_profile,
                      xid_errors_total=gpu.xid_errors_total, last_xid=gpu.last_xid, xid_active=gpu.xid_active,
                      attribution=dict(gpu.attribution))
