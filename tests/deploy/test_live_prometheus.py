"""Every recording rule, alert and dashboard panel evaluated with data on a real Prometheus.

On loopback: engines serving real bodies (tests/fixtures/engines), discovered as pods on this node (one
comes up after its container started, so its cold start is measured, and then serves moving traffic; one
stays down), the real exporter with fake GPUs (one throttled), the real scaler answering KEDA's calls for
the model (once plain, once with an ITL target, for the latency panels), and a real
Prometheus scraping both under the job names the rules use, with deploy/prometheus/rules.yaml loaded (its
group intervals shortened to the scrape interval, nothing else changed). Then every recording rule and
every panel query must return series, every alert expression must evaluate, and the alerts whose
condition the world holds (an engine down, a throttled GPU, scrape errors, a refused activation) must
return data.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from conftest import engine_body
from fakeengine import FakeEngine
from fakekube import pod
from prometheus_server import Job, PrometheusServer, running_prometheus
from scaler_harness import ref, stub

from keda_llm.exporter.cli import build_collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.fake_nvml import FakeGpu, FakeNvml
from keda_llm.exporter.nvml import NvmlCollector
from keda_llm.exporter.server import create_server
from keda_llm.scaler.assembly import ScalerSettings, start_in_thread
from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboard.json"
NODE = "gpu-node-1"
NS = "llm"


def _gpu(i: int, **values: Any) -> FakeGpu:
    gpu = FakeGpu(uuid=f"GPU-{i:08x}-0000-4000-8000-{i:012x}", name="NVIDIA H100 80GB HBM3",
                  memory_total=85_899_345_920, memory_used=42_949_672_960, utilization_gpu=87, power_mw=412_345,
                  power_limit_mw=700_000, energy_mj=123_456_789, temperature_c=71, sm_clock_mhz=1980)
    for key, value in values.items():
        setattr(gpu, key, value)
    return gpu


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Traffic:
    """Serves the vLLM engine's body with traffic moving through it: every half second its running batch
    (36 or 8 requests, alternating every 5 s), its first tokens (10 a second) and its decoded tokens (100 a
    second at an ITL of 10 ms + 0.5 ms a request) advance, so the scaler's latency term has a signal and
    fits an ITL floor. The histograms' +Inf buckets move with their counts, as an engine's do."""

    TICK_S = 0.5

    def __init__(self, engine: FakeEngine, body: str) -> None:
        self.engine, self.body = engine, body
        self.ttft = [16.0, 5.477985382080078]  # count, sum: the fixture's own
        self.itl = [81.0, float(re.search(r'^vllm:inter_token_latency_seconds_sum\{[^}]*\} (\S+)$', body,
                                          re.M).group(1))]  # type: ignore[union-attr]
        self.generated = 97.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(5)

    def _run(self) -> None:
        t = 0.0
        while not self._stop.wait(self.TICK_S):
            t += self.TICK_S
            running = 36.0 if int(t // 5) % 2 == 0 else 8.0
            self.ttft[0] += 10 * self.TICK_S
            self.ttft[1] += 10 * self.TICK_S * 0.2
            self.itl[0] += 100 * self.TICK_S
            self.itl[1] += 100 * self.TICK_S * (0.010 + 0.0005 * running)
            self.generated += 100 * self.TICK_S
            self.engine.body = self.render(running).encode()

    def render(self, running: float) -> str:
        values = {"vllm:num_requests_running": running, "vllm:generation_tokens_total": self.generated,
                  "vllm:time_to_first_token_seconds_count": self.ttft[0],
                  "vllm:time_to_first_token_seconds_sum": self.ttft[1],
                  "vllm:inter_token_latency_seconds_count": self.itl[0],
                  "vllm:inter_token_latency_seconds_sum": self.itl[1]}
        body = self.body
        for name, value in values.items():
            body = re.sub(rf"^({re.escape(name)}\{{[^}}]*\}}) \S+$", rf"\g<1> {value!r}", body, flags=re.M)
        for name, value in (("vllm:time_to_first_token_seconds", self.ttft[0]),
                            ("vllm:inter_token_latency_seconds", self.itl[0])):
            body = re.sub(rf'^({re.escape(name)}_bucket\{{[^}}]*le="\+Inf"[^}}]*\}}) \S+$', rf"\g<1> {value!r}",
                          body, flags=re.M)
        return body


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    tmp = tmp_path_factory.mktemp("live")
    vllm = FakeEngine(engine_body("vllm-0.32.0-cpu-load.prom"))
    vllm.mode = "status"  # loading: the exporter sees it not ready, then come up (its cold start is measured)
    traffic = Traffic(vllm, engine_body("vllm-0.32.0-cpu-load.prom"))
    llama = FakeEngine(engine_body("llamacpp-b11434-load.prom"))
    dead = FakeEngine(engine_body("vllm-0.32.0-cpu-idle.prom"))
    dead.mode = "status"  # never comes up: LLMEngineNeverUp, scrape errors
    gone = FakeEngine(engine_body("vllm-0.32.0-cpu-idle.prom"))  # up, then down: LLMEngineDown
    started = _rfc3339(time.time() - 20)

    def annotated(name: str, engine: FakeEngine, **extra: str) -> dict[str, Any]:
        containers = [{"name": "engine", "image": "x", "ports": [{"containerPort": engine.port}]}]
        return pod(name, namespace=NS, node=NODE, ip="127.0.0.1", containers=containers,
                   started_at={"engine": started},
                   annotations={"keda-llm.io/scrape": "true", "keda-llm.io/port": str(engine.port), **extra})

    pods = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
        annotated("vllm-0", vllm), annotated("vllm-dead-0", dead), annotated("vllm-gone-0", gone),
        annotated("llama-0", llama, **{"keda-llm.io/model": "SmolLM2-135M-GGUF", "keda-llm.io/max-running": "4"})]}
    cfg = parse_config({"listen": "127.0.0.1:0", "interval": "1s", "timeout": "500ms", "node_name": NODE,
                        "kubernetes": {"enabled": True, "refresh_interval": "5s"}}, env={})
    gpus = NvmlCollector(FakeNvml([_gpu(0), _gpu(1, clocks_event_reasons=0x4)]))  # GPU 1: SW power cap
    collector = build_collector(cfg, gpu_source=gpus, list_pods=lambda node: pods)
    exporter, port = create_server(cfg.listen_address, collector)
    exporter.start()
    collector.start()
    scaler = start_in_thread(ScalerSettings(grpc_address="127.0.0.1:0", http_address=("127.0.0.1", 0),
                                            exporters=(f"127.0.0.1:{port}",), interval_s=1.0,
                                            activation_token="s3cret"))
    rules = tmp / "rules.yaml"
    rules.write_text(re.sub(r"interval: \d+s", "interval: 1s", RULES.read_text()))
    try:
        time.sleep(2.5)
        vllm.mode = "serve"  # the engine is up now, serving traffic
        traffic.start()
        gone.mode = "status"  # and this one, scraped by now, is down
        with grpc.insecure_channel(scaler.grpc_target) as channel:  # KEDA's first calls for the model
            client = stub(channel)
            so = ref("chat", namespace=NS, model="smollm2", exporters=f"127.0.0.1:{port}")
            name = client.GetMetricSpec(so).metricSpecs[0].metricName
            # the same model with a latency target: the latency panels' series
            slo = ref("chat-slo", namespace=NS, model="smollm2", exporters=f"127.0.0.1:{port}",
                      targetInterTokenLatency="56ms", itlScaling="busy")
            slo_name = client.GetMetricSpec(slo).metricSpecs[0].metricName
            request = urllib.request.Request(f"{scaler.http_url}/v1/activate/{NS}/chat", data=b"", method="POST")
            jobs = [Job("keda-llm-exporter", [f"127.0.0.1:{port}"]),
                    Job("keda-llm-scaler", [scaler.http_url.removeprefix("http://")])]
            with running_prometheus(tmp / "prom", jobs, rule_files=[rules]) as prom:
                deadline = time.monotonic() + 60
                refused = False
                while time.monotonic() < deadline:  # KEDA keeps polling while Prometheus fills
                    for ref_, metric in ((so, name), (slo, slo_name)):
                        with contextlib.suppress(grpc.RpcError):
                            client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref_, metricName=metric))
                    if not refused and prom.query("up{job='keda-llm-scaler'} == 1")["data"]["result"]:
                        with pytest.raises(urllib.error.HTTPError):  # no token: refused, counted, seen rising
                            urllib.request.urlopen(request, timeout=10)
                        refused = True
                    if prom.query("model:llm_engine_startup_seconds:max1d")["data"]["result"] and \
                            prom.query("rate(llm_gpu_energy_joules_total[5m])")["data"]["result"] and \
                            prom.query("keda_llm_scaler_desired_replicas")["data"]["result"] and \
                            prom.query("keda_llm_scaler_itl_floor_seconds")["data"]["result"] and \
                            prom.query("keda_llm_scaler_latency_ratio")["data"]["result"]:
                        break
                    time.sleep(0.5)
                time.sleep(3)  # a few more evaluations of every rule on full data
                yield prom
    finally:
        traffic.stop()
        scaler.stop()
        collector.stop()
        exporter.stop()
        for engine in (vllm, llama, dead, gone):
            engine.stop()


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _result(prom: PrometheusServer, promql: str) -> list[Any]:
    doc = prom.query(promql)
    assert doc["status"] == "success", (promql, doc)
    result: list[Any] = doc["data"]["result"]
    return result


@pytest.mark.parametrize("record", [r["record"] for r in _rules() if "record" in r])
def test_every_recording_rule_has_data(world: PrometheusServer, record: str) -> None:
    assert _result(world, record), f"{record} recorded nothing"


def _panel_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    out = []
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r'=~"\$[a-z_]+"', '=~".*"', target["expr"])
            out.append((panel["title"], expr))
    return out


@pytest.mark.parametrize(("title", "expr"), _panel_queries())
def test_every_dashboard_panel_query_has_data(world: PrometheusServer, title: str, expr: str) -> None:
    assert _result(world, expr), f"panel {title!r}: {expr} has no data"


ALERTS_THE_WORLD_HOLDS = {"LLMEngineDown", "LLMEngineNeverUp", "LLMGPUThrottled", "LLMActivationRejected",
                          "LLMExporterScrapeErrors"}


def test_a_pod_in_its_cold_start_is_not_an_engine_down(world: PrometheusServer) -> None:
    """LLMEngineDown is for engines that were up: the one that never answered is LLMEngineNeverUp's."""
    (down,) = [r for r in _rules() if r.get("alert") == "LLMEngineDown"]
    (never,) = [r for r in _rules() if r.get("alert") == "LLMEngineNeverUp"]
    assert {r["metric"]["pod"] for r in _result(world, down["expr"])} == {"vllm-gone-0"}
    assert {r["metric"]["pod"] for r in _result(world, never["expr"])} == {"vllm-dead-0"}


@pytest.mark.parametrize("alert", [r["alert"] for r in _rules() if "alert" in r])
def test_every_alert_evaluates_and_those_whose_condition_holds_have_data(world: PrometheusServer,
                                                                        alert: str) -> None:
    (rule,) = [r for r in _rules() if r.get("alert") == alert]
    result = _result(world, rule["expr"])
    if alert in ALERTS_THE_WORLD_HOLDS:
        assert result, f"{alert}: its condition holds in this world, yet {rule['expr']} returned nothing"
    if alert in ("LLMExporterDown", "LLMScalerDown", "LLMExportersAbsent", "LLMScalerAbsent"):
        assert result == [], f"{alert} returned data while both are up: {result}"
