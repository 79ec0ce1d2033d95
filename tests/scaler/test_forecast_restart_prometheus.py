"""A scaler pod restarted mid-trace resumes its seasonal forecast from a REAL Prometheus (issue 11's restart
test, with forecasts): the pod that ran through and the pod rebuilt from Prometheus' range queries decide the
same count, the seasonal forecast's figures included, one horizon before a daily rise.

Two and a third days of two replicas' exporter series (a quiet night at 2 requests/s, a 12-hour day at 10,
the day starting five minutes after the data ends) are written as OpenMetrics at the timestamps a 30 s
scrape would have given and turned into TSDB blocks with `promtool tsdb create-blocks-from openmetrics`, so
nothing waits two days. The pod that ran through ingests every scrape; the restarted pod gets the minutes
before its restart from Prometheus (scaler/backfill.py, as the restorer asks for them) and the live scrapes
after it. tests/scaler/test_decide_seasonal.py holds the same in memory; tests/scaler/
test_history_long_prometheus.py holds the rebuilt minutes to the live ones over 150 minutes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_server import PrometheusServer, backfilled_prometheus

from keda_llm.scaler import backfill
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import Observation, PolicyState, ReplicaSample, WorkloadState
from keda_llm.scaler.sources.promql import PrometheusClient

NS, MODEL = "llm", "llama"
PODS = ("a", "b")
DAY = 86_400.0
STEP = 30.0  # the scrape interval
SPAN = 2 * DAY + 8 * 3600.0  # the data: two days and the night before the third
RISE_AFTER = 300.0  # the day starts five minutes after the data ends
RESTART_BEFORE = 600.0  # the restarted pod came up ten minutes before the end


@dataclass(frozen=True)
class Feed:
    start: float  # the first scrape (a whole minute)
    end: float  # the last scrape: "now" for both pods

    def busy(self, t: float) -> bool:
        """The day: 12 hours from RISE_AFTER past the end, every 24 hours."""
        return (t - (self.end + RISE_AFTER)) % DAY < 12 * 3600.0

    def rate(self, t: float) -> float:
        return 10.0 if self.busy(t) else 2.0

    def observations(self) -> Iterator[Observation]:
        """Both replicas every STEP: counters at the rate (500 prompt and 100 output tokens a request), running
        requests by Little's law (2 s in the system), KV 1,000 tokens a running request."""
        done = 0.0
        n = round((self.end - self.start) / STEP)
        for j in range(n + 1):
            t = self.start + j * STEP
            done += self.rate(t) * STEP
            running = self.rate(t)  # rate x 2 s, over two replicas
            yield Observation(NS, MODEL, t, tuple(
                ReplicaSample(pod, t, running=running, waiting=0.0, kv_usage_ratio=running * 1000 / 100_000,
                              kv_capacity_tokens=100_000.0, prompt_tokens_total=500 * done / 2,
                              generation_tokens_total=100 * done / 2, requests_finished_total=done / 2)
                for pod in PODS))

    def openmetrics(self) -> str:
        """What Prometheus would have scraped from the exporter, grouped by metric name, with timestamps."""
        by_name: dict[str, list[str]] = {}
        for obs in self.observations():
            for s in obs.replicas:
                lab = f'model="{MODEL}",engine="vllm",role="unified",namespace="{NS}",pod="{s.pod}",node="n1"'
                for name, value in (("llm_engine_up", 1.0), ("llm_requests_running", s.running),
                                    ("llm_requests_waiting", s.waiting), ("llm_kv_cache_usage_ratio", s.kv_usage_ratio),
                                    ("llm_requests_finished_total", s.requests_finished_total),
                                    ("llm_prompt_tokens_total", s.prompt_tokens_total),
                                    ("llm_generation_tokens_total", s.generation_tokens_total)):
                    by_name.setdefault(name, []).append(f"{name}{{{lab}}} {value!r} {obs.at:.3f}")
        return "\n".join(line for lines in by_name.values() for line in lines) + "\n# EOF\n"


@dataclass
class World:
    feed: Feed
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    end = math.floor(time.time() / 60) * 60 - 15 * 60  # old enough for Prometheus to take as history
    feed = Feed(end - SPAN, end)
    with backfilled_prometheus(tmp_path_factory.mktemp("prometheus-days"), feed.openmetrics()) as prom:
        prom.wait_for(f'count(llm_engine_up{{model="{MODEL}"}} @ {end - 60})',
                      lambda r: len(r) == 1 and r[0]["value"][1] == "2")
        yield World(feed, prom)


def decided(h: ModelHistory, now: float, mode: str = "hybrid") -> dict[str, float]:
    cfg = parse_metadata({"model": MODEL, "coldStart": "10m", "policy": "concurrency", "targetConcurrency": "2",
                          "mode": mode})
    d, _ = decide(h, cfg, PolicyState(initialized=True), WorkloadState(2, 2, polling_interval_s=10.0), now)
    return {**d.details, "replicas": float(d.replicas)}


def test_a_pod_rebuilt_from_prometheus_forecasts_as_the_one_that_ran_through(world: World) -> None:
    feed = world.feed
    restart = feed.end - RESTART_BEFORE
    through = ModelHistory(NS, MODEL)
    restarted = ModelHistory(NS, MODEL)
    for obs in feed.observations():
        through.ingest(obs)
    # the restarted pod: the complete minutes before it came up from Prometheus, then the live scrapes
    first, last = int(feed.start // 60), int(restart // 60) - 1
    minutes, values = backfill.rebuild(PrometheusClient(world.prometheus.url), NS, MODEL, first, last)
    assert len(minutes) == last - first + 1 and restarted.long.merge(minutes, values) > 3000
    for obs in feed.observations():
        if obs.at >= restart:
            restarted.ingest(obs)
    a, b = decided(through, feed.end), decided(restarted, feed.end)
    # the forecast is there and sees the day coming: 2 requests/s now, five times that one horizon ahead
    # (10 minutes cold start + 10 s poll + 15 s sync reaches 5 minutes past the rise)
    assert a["seasonal_available"] == b["seasonal_available"] == 1.0
    assert a["seasonal_growth"] == pytest.approx(5.0, rel=0.1)
    seasonal = {k: v for k, v in a.items() if k.startswith("seasonal")}
    assert len(seasonal) >= 4 and seasonal == pytest.approx({k: b[k] for k in seasonal}, rel=0.02)
    assert a["replicas"] == b["replicas"] >= 9
    # reacting alone, the restarted pod asks for what the night needs: 2 requests/s x 2 s / 2 per replica
    assert decided(restarted, feed.end, "reactive")["replicas"] == 2
