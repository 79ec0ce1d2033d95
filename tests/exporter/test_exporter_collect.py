"""Collection: the bounded fetch, the pure state fold (cold start), and the cycle's isolation rules."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from conftest import engine_body
from fakeengine import FakeEngine, refused_url

from keda_llm.exporter.collect import Collector, Outcome, TargetState, fetch, record
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.discovery import Discovery
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.errors import REASONS, ScrapeError
from keda_llm.exporter.fake_nvml import FakeGpu, FakeNvml
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Target
from keda_llm.exporter.nvml import NvmlCollector
from keda_llm.exporter.render import render


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    e = FakeEngine(engine_body("vllm-0.32.0-cpu-load.prom"))
    yield e
    e.stop()


# -- fetch ---------------------------------------------------------------------------------------------


def test_fetch_returns_the_exact_body(engine: FakeEngine) -> None:
    assert fetch(engine.url, 2.0, 1024 * 1024) == engine_body("vllm-0.32.0-cpu-load.prom").encode()


@pytest.mark.parametrize(("mode", "reason"), [
    ("hang", "timeout"),  # accepted, read the request, never answers
    ("trickle", "timeout"),  # answers, one byte every 50 ms: each read is quick, the whole is not
    ("status", "http_status"),
])
def test_fetch_failures(engine: FakeEngine, mode: str, reason: str) -> None:
    engine.mode = mode  # type: ignore[assignment]
    with pytest.raises(ScrapeError) as err:
        fetch(engine.url, 0.3, 1024 * 1024)
    assert err.value.reason == reason


@pytest.mark.parametrize("declares_length", [True, False])
def test_fetch_stops_at_the_size_cap(engine: FakeEngine, declares_length: bool) -> None:
    engine.mode = "huge"
    engine.huge_declares_length = declares_length
    with pytest.raises(ScrapeError) as err:
        fetch(engine.url, 5.0, 1024 * 1024)
    assert err.value.reason == "too_large"


def test_fetch_connection_refused() -> None:
    with pytest.raises(ScrapeError) as err:
        fetch(refused_url(), 1.0, 1024)
    assert err.value.reason == "connection"


# -- record: the pure state fold -------------------------------------------------------------------------

EXPORTER_START = 1000.0
M = EngineMetrics(engine="vllm", model="m", requests_running=3.0)


def ok(at: float) -> Outcome:
    return Outcome(at=at, duration=0.01, metrics=(M,))


def failed(at: float, reason: str = "connection") -> Outcome:
    return Outcome(at=at, duration=0.01, error=ScrapeError(reason, "x"))  # type: ignore[arg-type]


def fold(target: Target, outcomes: list[tuple[Target, Outcome]]) -> TargetState:
    state = TargetState(target=target)
    for t, o in outcomes:
        state = record(state, t, o, EXPORTER_START)
    return state


T = Target(url="http://e/metrics", pod="p", container_start=1100.0)


@pytest.mark.parametrize(("label", "target", "outcomes", "startup"), [
    # the container started after the exporter: the first success measures the cold start
    ("started after exporter", T, [ok(1160.0)], 60.0),
    # loading for a while (refused), then up: container start to the first success
    ("failed first", T, [failed(1105.0), failed(1110.0), ok(1190.5)], 90.5),
    # already running when the exporter started and answered at once: unknowable, no series
    ("running before exporter", Target(url="u", container_start=500.0), [ok(1001.0)], None),
    # ...but seen failing first, the exporter watched it come up
    ("before exporter, seen failing", Target(url="u", container_start=990.0), [failed(1001.0), ok(1030.0)], 40.0),
    ("no container start (static target)", Target(url="u"), [failed(1001.0), ok(1010.0)], None),
    # measured once: later failures and successes do not change it
    ("measured once", T, [ok(1160.0), failed(1165.0), ok(1170.0)], 60.0),
    # a container restart is a new instance: measured again from its own start
    ("restart", T, [ok(1160.0), (T, failed(1300.0)), (Target(url=T.url, pod="p", container_start=1290.0),
                                                       failed(1301.0)),
                    (Target(url=T.url, pod="p", container_start=1290.0), ok(1320.0))], 30.0),
])
def test_cold_start(label: str, target: Target, outcomes: list[Outcome | tuple[Target, Outcome]],
                    startup: float | None) -> None:
    pairs = [o if isinstance(o, tuple) else (target, o) for o in outcomes]
    assert fold(target, pairs).startup_seconds == startup, label


def test_failure_drops_series_keeps_last_success_and_counts_the_reason() -> None:
    state = fold(T, [(T, ok(1160.0)), (T, failed(1165.0, "timeout")), (T, failed(1170.0, "timeout")),
                     (T, failed(1175.0, "parse"))])
    assert (state.up, state.metrics, state.last_success) == (False, (), 1160.0)
    assert state.identities == (("m", "vllm", "unified"),)
    assert state.errors == {**dict.fromkeys(REASONS, 0), "timeout": 2, "parse": 1}
    back = record(state, T, ok(1180.0), EXPORTER_START)
    assert (back.up, back.metrics, back.last_success, back.errors["timeout"]) == (True, (M,), 1180.0, 2)


# -- the collector -----------------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_stuck_scrape_is_not_started_again_and_does_not_block_the_cycle(engine: FakeEngine) -> None:
    release = threading.Event()
    calls: list[str] = []

    def blocking_normalize(body: str, target: Target) -> list[EngineMetrics]:
        calls.append(target.url)
        if target.pod == "stuck":
            release.wait(10)
        return normalize(body, target)

    other = FakeEngine(engine_body("llamacpp-b11434-load.prom"))
    try:
        cfg = parse_config({"interval": 0.5, "timeout": 0.1, "targets": [
            {"url": engine.url, "pod": "stuck"}, {"url": other.url, "pod": "ok", "model": "smol"}]}, env={})
        collector = Collector(cfg, Discovery(cfg), blocking_normalize, render, clock=Clock(2000.0))
        first = collector.run_cycle()
        second = collector.run_cycle()
        release.set()
    finally:
        other.stop()
    stuck = {st.target.pod: st for st in second.targets}["stuck"]
    assert stuck.errors["timeout"] == 2
    assert calls.count(engine.url) == 1  # the second cycle did not start a second scrape of it
    assert {st.target.pod: st.up for st in first.targets} == {"stuck": False, "ok": True}
    assert {st.target.pod: st.up for st in second.targets} == {"stuck": False, "ok": True}
    collector.stop()


def test_gpus_come_from_the_nvml_collector() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-aaa", memory_used=2 * 1024**3, utilization_gpu=75, power_mw=300_500)])
    cfg = parse_config({"node_name": "node-a"}, env={})
    collector = Collector(cfg, Discovery(cfg), normalize, render, gpu_source=NvmlCollector(nvml))
    snapshot = collector.run_cycle()
    (gpu,) = snapshot.gpus
    assert (gpu.uuid, gpu.memory_used_bytes, gpu.utilization_ratio, gpu.power_watts) == (
        "GPU-aaa", 2 * 1024**3, 0.75, 300.5)
    text = collector.exposition().decode()
    labels = ('gpu="0",uuid="GPU-aaa",gpu_model="NVIDIA H100 80GB HBM3",mig_profile="",node="node-a",'
              'namespace="",pod="",container=""')
    assert f"llm_gpu_up{{{labels}}} 1\n" in text
    assert f"llm_gpu_power_watts{{{labels}}} 300.5\n" in text
    collector.stop()


def test_a_stuck_gpu_read_keeps_the_last_gpu_values_one_cycle_then_reports_down(engine: FakeEngine) -> None:
    # NVML hangs when a GPU falls off the bus: the values were kept with llm_gpu_up 1 for as long as it hung
    release = threading.Event()
    gpu = GpuMetrics(index="0", uuid="GPU-a", gpu_model="H100", memory_used_bytes=5.0, xid_errors_total=1.0,
                     last_xid=79.0, xid_active=1.0, attribution={"namespace": "llm", "pod": "p"})

    class StuckAfterOne:
        calls = 0

        def collect(self) -> list[GpuMetrics]:
            self.calls += 1
            if self.calls > 1:
                release.wait(10)
            return [gpu]

    source = StuckAfterOne()
    cfg = parse_config({"interval": 0.5, "timeout": 0.1, "targets": [{"url": engine.url, "pod": "e"}]}, env={})
    clock = Clock(3000.0)
    collector = Collector(cfg, Discovery(cfg), normalize, render, gpu_source=source, clock=clock)
    assert collector.run_cycle().gpus == (gpu,)
    clock.now = 3005.0
    second = collector.run_cycle()  # NVML hangs in this one
    clock.now = 3010.0
    third = collector.run_cycle()  # ...and is not asked again while it hangs
    release.set()
    assert second.gpus == (gpu,)  # one slow cycle: the last values
    (down,) = third.gpus  # still running when this cycle started: down, the XIDs and the pod kept
    assert (down.up, down.memory_used_bytes, down.uuid, down.attribution) == (False, None, "GPU-a", gpu.attribution)
    assert (down.xid_errors_total, down.last_xid, down.xid_active) == (1.0, 79.0, 1.0)
    assert source.calls == 2
    assert [(st.up, st.last_success) for st in third.targets] == [(True, 3010.0)]
    clock.now = 3015.0
    assert collector._gpu_future is not None
    collector._gpu_future.result(timeout=5)  # the released read returns
    assert collector.run_cycle().gpus == (gpu,)  # answered again: up, with its values
    collector.stop()
