"""Every recording rule, alert and dashboard panel evaluated with data on a real Prometheus.

On loopback: engines serving real bodies (tests/fixtures/engines), discovered as pods on this node (one
comes up after its container started, so its cold start is measured; one stays down), the real exporter
with fake GPUs (one throttled), the real scaler answering KEDA's calls for the model, and a real
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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    tmp = tmp_path_factory.mktemp("live")
    vllm = FakeEngine(engine_body("vllm-0.32.0-cpu-load.prom"))
    vllm.mode = "status"  # loading: the exporter sees it not ready, then come up (its cold start is measured)
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
        vllm.mode = "serve"  # the engine is up now
        gone.mode = "status"  # and this one, scraped by now, is down
        with grpc.insecure_channel(scaler.grpc_target) as channel:  # KEDA's first calls for the model
            client = stub(channel)
            so = ref("chat", namespace=NS, model="smollm2", exporters=f"127.0.0.1:{port}")
            name = client.GetMetricSpec(so).metricSpecs[0].metricName
            request = urllib.request.Request(f"{scaler.http_url}/v1/activate/{NS}/chat", data=b"", method="POST")
            jobs = [Job("keda-llm-exporter", [f"127.0.0.1:{port}"]),
                    Job("keda-llm-scaler", [scaler.http_url.removeprefix("http://")])]
            with running_prometheus(tmp / "prom", jobs, rule_files=[rules]) as prom:
                deadline = time.monotonic() + 60
                refused = False
                while time.monotonic() < deadline:  # KEDA keeps polling while Prometheus fills
                    with contextlib.suppress(grpc.RpcError):
                        client.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so, metricName=name))
                    if not refused and prom.query("up{job='keda-llm-scaler'} == 1")["data"]["result"]:
                        with pytest.raises(urllib.error.HTTPError):  # no token: refused, counted, seen rising
                            urllib.request.urlopen(request, timeout=10)
                        refused = True
                    if prom.query("model:llm_engine_startup_seconds:max1d")["data"]["result"] and \
                            prom.query("rate(llm_gpu_energy_joules_total[5m])")["data"]["result"] and \
                            prom.query("keda_llm_scaler_desired_replicas")["data"]["result"]:
                        break
                    time.sleep(0.5)
                time.sleep(3)  # a few more evaluations of every rule on full data
                yield prom
    finally:
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
