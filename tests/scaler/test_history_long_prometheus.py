"""The long history rebuilt from a REAL Prometheus (scaler/backfill.py, scaler/restore.py) and kept in a
per-pod snapshot (scaler/snapshot.py), through the scaler as `keda-llm scaler` assembles it.

The Prometheus holds 150 minutes of two replicas' exporter series, written as OpenMetrics at the
timestamps a 15 s scrape would have given and turned into TSDB blocks with `promtool tsdb
create-blocks-from openmetrics` (Prometheus' own backfill tool: prometheus_server.backfilled_prometheus),
so a test needs no 150-minute wait.
The live feed is made of the very same samples: an Observation at each scrape time (or the exporter
body a ScalerPod scrapes). Expected values are derived by hand from the generator below.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from prometheus_server import BodyServer, PrometheusServer, backfilled_prometheus, refused_address
from scaler_harness import FakeClock, ScalerPod, ref, stub

from keda_llm.scaler import backfill
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.longhistory import LONG_FIELDS, MAX_RELATIVE_ERROR
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.restore import LongHistoryRestorer, StoreRef
from keda_llm.scaler.service import HistoryStore
from keda_llm.scaler.sources.promql import PrometheusClient

NS, MODEL, OTHER = "llm", "llama", "qwen"
PODS = ("a", "b")
K = 150  # minutes of data
OFFSETS = (5, 20, 35, 50)  # scrape times within each minute (15 s interval)
GAP = range(40, 50)  # nothing scraped at all: Prometheus (and a live scaler) saw nothing
NO_REPLICA = range(70, 80)  # the model had no replica (the other model's engine was scraped, until:)
NO_ENGINE = range(75, 80)  # no engine at all on the node: only the exporter's own series were scraped
# the first minute after a change of counter rate: the live feed's first rate in a minute spans the scrape
# before it (in the minute before), Prometheus' rate[60s] only the minute's own samples; they agree elsewhere
RATE_EDGES = {k for k in range(K) if k % 10 == 0}
DAY = 86_400.0


def running(i: int, k: int) -> float:
    return 2.0 + (k * (i + 3)) % 7


def waiting(i: int, k: int) -> float:
    return float((k + i) % 3)


def pending(k: int) -> float:
    """The gateway's pending requests for the model in minute k (its activationQuery's answer): held
    while the model has no replica, now and then otherwise."""
    return 3.0 + k % 2 if k in NO_REPLICA else float(k % 4 == 0)


UPSTREAM = f'sum(gateway_pending_requests{{model="{MODEL}"}})'


def rate(i: int, k: int) -> float:
    """Requests finished per second by pod i in minute k (10-minute segments)."""
    return 0.5 + 0.25 * ((k // 10 + i) % 4)


def finished(i: int, t: float, m0: int) -> float:
    """Pod i's finished counter at time t: the integral of `rate`, from 1,000 at minute m0."""
    k = math.floor(t / 60) - m0
    return 1000.0 + sum(rate(i, j) * 60 for j in range(k)) + rate(i, k) * (t - (m0 + k) * 60)


@dataclass(frozen=True)
class Data:
    m0: int  # the first minute (absolute minute number)

    def times(self, k: int) -> list[float]:
        return [(self.m0 + k) * 60.0 + o for o in OFFSETS]

    def present(self, k: int) -> tuple[int, ...]:
        return () if k in GAP or k in NO_REPLICA else (0, 1)

    def replica(self, i: int, t: float) -> ReplicaSample:
        k = math.floor(t / 60) - self.m0
        c = finished(i, t, self.m0)
        return ReplicaSample(PODS[i], t, running=running(i, k), waiting=waiting(i, k), requests_finished_total=c,
                             prompt_tokens_total=700 * c, generation_tokens_total=180 * c)

    def expected(self, field: str, upstream: bool = False) -> npt.NDArray[np.float64]:
        """By hand: per minute, the sum over the pods present; 0 with none; NaN in the gap. `upstream`:
        demand includes the gateway's pending requests."""
        out = np.zeros(K)
        for k in range(K):
            if k in GAP:
                out[k] = math.nan
                continue
            if upstream and field == "demand":
                out[k] += pending(k)
            for i in self.present(k):
                if field == "demand":
                    out[k] += running(i, k) + waiting(i, k)
                else:
                    out[k] += rate(i, k) * {"finished_rate": 1, "prompt_rate": 700, "generation_rate": 180}[field]
        return out

    def exporter_body(self, t: float) -> str:
        """The exporter's /metrics at time t: the model's present pods and the other model's engine."""
        k = math.floor(t / 60) - self.m0
        lines = []
        for i in self.present(k):
            lines += series_lines(NS, MODEL, PODS[i], self.replica(i, t))
        if k not in NO_ENGINE:
            lines += series_lines(NS, OTHER, "q", ReplicaSample("q", t, running=1.0, waiting=0.0))
        engines = len(self.present(k)) + (k not in NO_ENGINE)
        lines += [f'llm_exporter_targets{{node="n1",state="all"}} {engines}',
                  f'llm_exporter_targets{{node="n1",state="up"}} {engines}']
        return "\n".join(lines) + "\n"

    def openmetrics(self) -> str:
        """Every sample Prometheus would have scraped, grouped by metric name, with timestamps."""
        by_name: dict[str, list[str]] = {}
        for k in range(K):
            if k in GAP:
                continue
            for t in self.times(k):
                gateway = f'gateway_pending_requests{{model="{MODEL}",namespace="{NS}"}} {pending(k)}'
                for line in [*self.exporter_body(t).splitlines(), gateway]:
                    by_name.setdefault(line.split("{", 1)[0], []).append(f"{line} {t:.3f}")
        return "\n".join(line for lines in by_name.values() for line in lines) + "\n# EOF\n"


def series_lines(namespace: str, model: str, pod: str, s: ReplicaSample) -> list[str]:
    lab = f'model="{model}",engine="vllm",role="unified",namespace="{namespace}",pod="{pod}",node="n1"'
    values = {"llm_engine_up": 1.0, "llm_engine_last_success_timestamp_seconds": s.timestamp,
              "llm_requests_running": s.running, "llm_requests_waiting": s.waiting,
              "llm_requests_finished_total": s.requests_finished_total,
              "llm_prompt_tokens_total": s.prompt_tokens_total,
              "llm_generation_tokens_total": s.generation_tokens_total}
    return [f"{name}{{{lab}}} {value!r}" for name, value in values.items() if value is not None]


@dataclass
class World:
    data: Data
    prometheus: PrometheusServer
    end: float  # the end of the data: (m0 + K) x 60


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # 150 minutes ending 15 minutes ago: old enough for Prometheus to take as history
    end = math.floor(time.time() / 60) * 60 - 15 * 60
    data = Data(m0=int(end // 60) - K)
    with backfilled_prometheus(tmp_path_factory.mktemp("prometheus-long"), data.openmetrics()) as prom:
        prom.wait_for(f'count(llm_engine_up{{model="{MODEL}"}} @ {end - 60})', lambda r: len(r) == 1)
        yield World(data, prom, end)


def live_history(data: Data, upstream: bool = False) -> ModelHistory:
    h = ModelHistory(NS, MODEL, long_days=1)
    for k in range(K):
        if k in GAP:
            continue
        for t in data.times(k):
            h.ingest(Observation(NS, MODEL, t, tuple(data.replica(i, t) for i in data.present(k)),
                                 upstream_demand=pending(k) if upstream else None))
    return h


def assert_close(got: npt.NDArray[np.float64], want: npt.NDArray[np.float64], rel: float, skip: set[int] = frozenset(),
                 what: str = "") -> None:
    for k in range(K):
        if k in skip:
            continue
        if math.isnan(want[k]) or math.isnan(got[k]):
            assert math.isnan(want[k]) and math.isnan(got[k]), f"{what} minute {k}: {got[k]} vs {want[k]}"
        else:
            assert got[k] == pytest.approx(want[k], rel=rel, abs=1e-12), f"{what} minute {k}: {got[k]} vs {want[k]}"


def test_live_feed_matches_the_hand_derived_minutes(world: World) -> None:
    live = live_history(world.data)
    for field in LONG_FIELDS:
        starts, got = live.minutes(field, world.end, K * 60)
        assert starts[0] == world.data.m0 * 60.0 and len(got) == K
        # the first minute has no rate (one scrape before it: none), and edges span two segments
        skip = set() if field == "demand" else RATE_EDGES
        assert_close(got, world.data.expected(field), MAX_RELATIVE_ERROR, skip, field)


def test_rebuild_from_a_real_prometheus_gives_the_live_minutes(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    client = PrometheusClient(world.prometheus.url)
    m0 = world.data.m0
    live = live_history(world.data)
    minutes, values = backfill.rebuild(client, NS, MODEL, m0, m0 + K - 1)
    assert minutes.tolist() == list(range(m0, m0 + K))
    rebuilt = ModelHistory(NS, MODEL, long_days=1)
    assert rebuilt.long.merge(minutes, values) > 0
    for j, field in enumerate(LONG_FIELDS):
        # the rebuilt values themselves, against the hand-derived ones (no encoding yet)
        assert_close(values[:, j], world.data.expected(field), 1e-9, RATE_EDGES if j < 3 else set(), field)
        # and through the tier: what the forecaster reads from a rebuilt pod and from a live-fed one
        _, got = rebuilt.minutes(field, world.end, K * 60)
        _, want = live.minutes(field, world.end, K * 60)
        assert_close(got, want, 2 * MAX_RELATIVE_ERROR, RATE_EDGES if j < 3 else set(), field)
    # another model's minutes are not mixed in, nor another namespace's
    _, other = backfill.rebuild(client, "elsewhere", MODEL, m0, m0 + K - 1)
    assert (np.isnan(other[:, :]) | (other == 0)).all()  # collected (the engines ran) but not there: 0
    # chunked queries stitch to the same answer (14 days take 2 chunks of 10,080 minutes)
    monkeypatch.setattr(backfill, "CHUNK_MINUTES", 37)
    _, chunked = backfill.rebuild(client, NS, MODEL, m0, m0 + K - 1)
    assert np.array_equal(chunked, values, equal_nan=True)


def test_fourteen_days_stay_under_prometheus_points_limit(world: World) -> None:
    """A real Prometheus refuses more than 11,000 points per series: 20,160 minutes must be chunked."""
    client = PrometheusClient(world.prometheus.url)
    last = world.data.m0 + K - 1
    minutes, values = backfill.rebuild(client, NS, MODEL, last - 20_159, last)
    assert len(minutes) == 20_160
    assert np.isnan(values[:-K]).all()  # nothing older than the data
    assert values[-1, 3] == pytest.approx(world.data.expected("demand")[-1])


# -- through the scaler, as `keda-llm scaler` builds it ------------------------------------------------

METADATA = {"model": MODEL}


class Pod:
    """A ScalerPod (the real assembly) reading the exporter body of `data` at its clock's time."""

    def __init__(self, data: Data, exporter: BodyServer, start_k: int, *flags: str) -> None:
        self.data = data
        self.exporter = exporter
        self.clock = FakeClock(data.times(start_k)[0])
        self.pod = ScalerPod(self.clock, "--exporters", exporter.address, "--history-days", "1", *flags)
        stub(self.pod.channel).GetMetricSpec(ref(name="llama", **METADATA))  # KEDA asks: the model is watched

    def feed(self, k: int) -> None:
        """Minute k's scrapes (none in the gap: the exporter was unreachable)."""
        if k in GAP:
            return
        for t in self.data.times(k):
            self.clock.now = t
            self.exporter.set(self.data.exporter_body(t))
            self.pod.collect()

    def minutes(self, field: str, now: float) -> npt.NDArray[np.float64]:
        history = self.pod.sources.history(NS, parse_metadata(METADATA))
        assert history is not None
        starts, values = history.minutes(field, now, now - self.data.m0 * 60.0)  # from minute 0 on
        assert starts[0] == self.data.m0 * 60.0
        return values

    def stop(self) -> None:
        self.pod.stop()


@pytest.fixture
def exporter() -> Iterator[BodyServer]:
    server = BodyServer("")
    yield server
    server.close()


def spawn(pods: list[Pod]) -> Callable[..., Pod]:
    def make(*args: object) -> Pod:
        pod = Pod(*args)  # type: ignore[arg-type]
        pods.append(pod)
        return pod

    return make


@pytest.fixture
def pods() -> Iterator[list[Pod]]:
    started: list[Pod] = []
    yield started
    for pod in started:
        pod.stop()


def test_pods_on_one_prometheus_have_one_long_history_across_restarts(
        world: World, exporter: BodyServer, pods: list[Pod]) -> None:
    data, prom = world.data, ["--prometheus-address", world.prometheus.url]
    first = spawn(pods)(data, exporter, 60, *prom)  # starts at minute 60: minutes 0..59 come from Prometheus
    for k in range(60, 120):
        first.feed(k)
    second = spawn(pods)(data, exporter, 120, *prom)  # a second pod, fresh, at minute 120
    for k in range(120, K):
        first.feed(k)
        second.feed(k)
    pods.remove(first)
    first.stop()  # ... and the first restarts: a new pod at the end
    third = spawn(pods)(data, exporter, K, *prom)
    third.feed(K)  # (no data there: the exporter answers its last body; nothing is compared past K)
    for field in LONG_FIELDS:
        want = first.minutes(field, world.end)
        skip = RATE_EDGES if field != "demand" else set()
        assert_close(want, data.expected(field), MAX_RELATIVE_ERROR, skip, f"first pod {field}")
        assert_close(second.minutes(field, world.end), want, 2 * MAX_RELATIVE_ERROR, skip, f"second pod {field}")
        assert_close(third.minutes(field, world.end), want, 2 * MAX_RELATIVE_ERROR, skip, f"restarted {field}")
    assert first.pod.sources.restorer.failures == 0


def test_a_history_dir_carries_the_long_history_across_a_restart(
        tmp_path: Path, exporter: BodyServer, pods: list[Pod]) -> None:
    data = Data(m0=1_800_000_000 // 60)  # no Prometheus here: any time will do
    flags = ("--history-dir", str(tmp_path / "history"))
    before = spawn(pods)(data, exporter, 0, *flags)
    for k in range(100):
        before.feed(k)
    end = (data.m0 + 100) * 60.0
    saved = {field: before.minutes(field, end) for field in LONG_FIELDS}
    pods.remove(before)
    before.stop()  # writes the snapshot
    assert (tmp_path / "history" / "long-history.v1.bin").stat().st_size > 1440 * 6
    after = spawn(pods)(data, exporter, 100, *flags)
    other = spawn(pods)(data, exporter, 100, "--history-dir", str(tmp_path / "elsewhere"))
    for k in range(100, K):
        after.feed(k)
        other.feed(k)
    for field in LONG_FIELDS:
        got = after.minutes(field, (data.m0 + K) * 60.0)
        assert got[:100].tobytes() == saved[field][:100].tobytes()  # the saved minutes, to the bit
        skip = RATE_EDGES if field != "demand" else set()
        assert_close(got, data.expected(field), MAX_RELATIVE_ERROR, skip, field)
        # a pod with its own (empty) snapshot knows only what it saw: pods may differ without Prometheus
        assert np.isnan(other.minutes(field, (data.m0 + K) * 60.0)[:100]).all()


def test_a_corrupt_history_dir_is_a_log_line_and_an_empty_history(
        tmp_path: Path, exporter: BodyServer, pods: list[Pod], caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "long-history.v1.bin").write_bytes(b"\x00garbage, not a snapshot" * 100)
    data = Data(m0=1_800_000_000 // 60)
    with caplog.at_level(logging.WARNING, logger="keda_llm.scaler.snapshot"):
        pod = spawn(pods)(data, exporter, 0, "--history-dir", str(tmp_path))
    assert any("ignored: not a keda-llm long history snapshot (bad magic); starting with an empty long history"
               in r.getMessage() for r in caplog.records)
    pod.feed(0)
    pod.feed(1)
    got = pod.minutes("demand", (data.m0 + K) * 60.0)
    assert got[0] == pytest.approx(data.expected("demand")[0], rel=MAX_RELATIVE_ERROR)
    assert np.isnan(got[2:]).all()


def test_a_failed_rebuild_is_retried_and_live_minutes_stay(world: World, caplog: pytest.LogCaptureFixture) -> None:
    data = world.data
    store = HistoryStore(long_days=1)
    address = [refused_address()]  # Prometheus down at first
    clock = FakeClock(data.times(120)[0])
    restorer = LongHistoryRestorer(lambda: [StoreRef("src", address[0], store)], store.lock, clock=clock,
                                   retry_s=30.0)
    for k in (120, 121):
        for t in data.times(k):
            store.ingest(Observation(NS, MODEL, t, tuple(data.replica(i, t) for i in data.present(k))))
    clock.now = data.times(121)[-1]
    with caplog.at_level(logging.WARNING, logger="keda_llm.scaler.restore"):
        assert restorer.step() == 0
    assert restorer.failures == 1
    assert any(f"long history of {NS}/{MODEL}: rebuild from Prometheus failed, retrying in 30s: connection: "
               in r.getMessage() for r in caplog.records)
    clock.now += 20
    assert restorer.step() == 0 and restorer.failures == 1  # not before the retry is due
    address[0] = world.prometheus.url  # Prometheus is back
    clock.now += 10
    assert restorer.step() == 1 and restorer.step() == 0  # restored once
    history = store.get(NS, MODEL)
    assert history is not None
    end = (data.m0 + 122) * 60.0
    for field in LONG_FIELDS:
        _, got = history.minutes(field, end, end - data.m0 * 60.0)
        skip = RATE_EDGES if field != "demand" else set()
        want = data.expected(field)[:122]
        for k in range(122):  # rebuilt before minute 120, live after: all as derived by hand
            if k in skip or math.isnan(want[k]):
                continue
            assert got[k] == pytest.approx(want[k], rel=MAX_RELATIVE_ERROR), f"{field} minute {k}"
    # the minute 120 rate is live: its first observation had no rate, the other three in-minute ones do
    assert history.long.live_from == data.m0 + 121


@pytest.mark.parametrize("query", [UPSTREAM, f"scalar({UPSTREAM})"])
def test_upstream_demand_is_rebuilt_from_the_activation_query(world: World, query: str) -> None:
    """A vector query and a scalar one: the minute means of the gateway's pending requests join demand,
    where the model ran and where it had no replica (minutes 70-79: demand is all upstream)."""
    client = PrometheusClient(world.prometheus.url)
    m0 = world.data.m0
    _, values = backfill.rebuild(client, NS, MODEL, m0, m0 + K - 1, upstream=query)
    want = world.data.expected("demand", upstream=True)
    assert_close(values[:, 3], want, 1e-9, what="rebuilt demand")
    assert values[72, 3] == 3.0 and values[73, 3] == 4.0  # by hand: no replica, 3 + k % 2 pending
    live = live_history(world.data, upstream=True)
    rebuilt = ModelHistory(NS, MODEL, long_days=1)
    rebuilt.long.merge(*backfill.rebuild(client, NS, MODEL, m0, m0 + K - 1, upstream=query))
    assert_close(rebuilt.minutes("demand", world.end, K * 60)[1], live.minutes("demand", world.end, K * 60)[1],
                 2 * MAX_RELATIVE_ERROR, what="demand")


def test_an_activation_query_prometheus_refuses_is_left_out(world: World, caplog: pytest.LogCaptureFixture) -> None:
    client = PrometheusClient(world.prometheus.url)
    m0 = world.data.m0
    with caplog.at_level(logging.WARNING, logger="keda_llm.scaler.backfill"):
        _, values = backfill.rebuild(client, NS, MODEL, m0, m0 + K - 1, upstream="sum(")
    assert_close(values[:, 3], world.data.expected("demand"), 1e-9, what="demand without upstream")
    assert any(f"long history of {NS}/{MODEL}: activationQuery 'sum(' left out of the rebuild: api_error: "
               in r.getMessage() for r in caplog.records)
