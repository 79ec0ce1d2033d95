"""Writes dashboard.json: the keda-llm Grafana dashboard, kept as code so panels stay reviewable.

Run from the repository root: python deploy/grafana/build_dashboard.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SEL = 'namespace=~"$namespace", model=~"$model"'
GPU_SEL = 'node=~"$node"'


def panel(title: str, exprs: list[tuple[str, str]], unit: str, x: int, y: int, w: int = 12, h: int = 8,
          kind: str = "timeseries", description: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(exprs)
        ],
    }


def row(title: str, y: int) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": []}


def variable(name: str, query: str, label: str) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name}, "definition": query,
        "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "current": {},
    }


def build() -> dict[str, Any]:
    panels: list[dict[str, Any]] = [
        row("Load per model (engine-neutral)", 0),
        panel("Requests running / waiting", [
            (f"sum by (namespace, model) (llm_requests_running{{{SEL}}})", "{{namespace}}/{{model}} running"),
            (f"sum by (namespace, model) (llm_requests_waiting{{{SEL}}})", "{{namespace}}/{{model}} waiting"),
        ], "short", 0, 1, description="What saturates an LLM server: the running batch and the engine's queue."),
        panel("KV cache usage (capacity-weighted)", [
            (f"sum by (namespace, model) (llm_kv_cache_usage_ratio{{{SEL}}} * llm_kv_cache_capacity_tokens{{{SEL}}})"
             f" / sum by (namespace, model) (llm_kv_cache_capacity_tokens{{{SEL}}})", "{{namespace}}/{{model}}"),
        ], "percentunit", 12, 1),
        panel("Token throughput", [
            (f"sum by (namespace, model) (rate(llm_generation_tokens_total{{{SEL}}}[1m]))", "{{model}} generated/s"),
            (f"sum by (namespace, model) (rate(llm_prompt_tokens_total{{{SEL}}}[1m]))", "{{model}} prompt/s"),
        ], "short", 0, 9),
        panel("Time to first token / inter-token latency (p95)", [
            ("histogram_quantile(0.95, sum by (namespace, model, le) "
             f"(rate(llm_time_to_first_token_seconds_bucket{{{SEL}}}[5m])))", "{{model}} TTFT p95"),
            ("histogram_quantile(0.95, sum by (namespace, model, le) "
             f"(rate(llm_inter_token_latency_seconds_bucket{{{SEL}}}[5m])))", "{{model}} ITL p95"),
        ], "s", 12, 9),
        panel("Prefix-cache hit ratio and preemptions", [
            (f"sum by (namespace, model) (rate(llm_prefix_cache_hit_tokens_total{{{SEL}}}[5m])) / "
             f"sum by (namespace, model) (rate(llm_prefix_cache_queried_tokens_total{{{SEL}}}[5m]))", "{{model}} hits"),
            (f"sum by (namespace, model) (rate(llm_preemptions_total{{{SEL}}}[5m]))", "{{model}} preemptions/s"),
        ], "short", 0, 17),
        panel("Measured cold start", [
            (f"llm_engine_startup_seconds{{{SEL}}}", "{{namespace}}/{{pod}}"),
            (f"model:llm_engine_startup_seconds:max1d{{{SEL}}}", "{{namespace}}/{{model}} longest, 1d"),
        ], "s", 12, 17, description="Container start to the first successful scrape, per engine instance, and the "
           "longest per model over a day (kept after the pod is gone). An engine that was already running when "
           "its exporter started has no measurement: the exporter only measures starts it saw."),
        row("Scaler decisions", 25),
        panel("Desired replicas (scaler) and engines up", [
            ("max by (namespace, scaledobject) (keda_llm_scaler_desired_replicas{namespace=~\"$namespace\"})",
             "{{namespace}}/{{scaledobject}} desired"),
            (f"sum by (namespace, model) (llm_engine_up{{{SEL}}})", "{{namespace}}/{{model}} engines up"),
        ], "short", 0, 26),
        panel("Demand vs capacity seen by the scaler", [
            ("max by (namespace, scaledobject) (keda_llm_scaler_demand{namespace=~\"$namespace\"})",
             "{{scaledobject}} demand"),
            ("max by (namespace, scaledobject) (keda_llm_scaler_capacity{namespace=~\"$namespace\"})",
             "{{scaledobject}} capacity"),
        ], "short", 12, 26),
        panel("Latency term: ratio to its target", [
            ("max by (namespace, scaledobject, window) (keda_llm_scaler_latency_ratio{namespace=~\"$namespace\"})",
             "{{scaledobject}} {{window}}"),
        ], "short", 0, 34, description="With targetInterTokenLatency or targetTimeToFirstToken: the replicas the "
           "term asks for over those its window reflects. Over 1 it adds replicas; the panic window's reading "
           "over 1 with one replica ready is what starts Knative's panic mode."),
        panel("Fitted ITL floor and the replicas' mean ITL", [
            ("max by (namespace, scaledobject) (keda_llm_scaler_itl_floor_seconds{namespace=~\"$namespace\"})",
             "{{scaledobject}} ITL floor"),
            (f"sum by (namespace, model) (rate(llm_inter_token_latency_seconds_sum{{{SEL}}}[1m])) / "
             f"sum by (namespace, model) (rate(llm_inter_token_latency_seconds_count{{{SEL}}}[1m]))",
             "{{model}} mean ITL"),
        ], "s", 12, 34, description="The ITL no replica count goes under (one decode step at a batch of one, "
           "fitted from how the replicas' ITL moves with their batch). A target within a few floors of it leaves "
           "little room for a burst; with a target many floors up, itlScaling: busy reads the ITL against it."),
        row("GPUs (NVML)", 42),
        panel("GPU utilization", [(f"llm_gpu_utilization_ratio{{{GPU_SEL}}}", "{{node}} gpu{{gpu}} {{pod}}")],
              "percentunit", 0, 43, w=8),
        panel("GPU memory used", [(f"llm_gpu_memory_used_bytes{{{GPU_SEL}}}", "{{node}} gpu{{gpu}} {{pod}}")],
              "bytes", 8, 43, w=8),
        panel("GPU power", [(f"llm_gpu_power_watts{{{GPU_SEL}}}", "{{node}} gpu{{gpu}}")], "watt", 16, 43, w=8),
        panel("GPU temperature", [(f"llm_gpu_temperature_celsius{{{GPU_SEL}}}", "{{node}} gpu{{gpu}}")],
              "celsius", 0, 51, w=8),
        panel("GPU throttled / lost", [
            (f"llm_gpu_throttled{{{GPU_SEL}}}", "{{node}} gpu{{gpu}} throttled"),
            (f"1 - llm_gpu_up{{{GPU_SEL}}}", "{{node}} gpu{{gpu}} lost"),
        ], "short", 8, 51, w=8),
        panel("Exporter scrape errors", [
            ("sum by (instance, reason) (rate(llm_exporter_scrape_errors_total[5m]))", "{{instance}} {{reason}}"),
        ], "short", 16, 51, w=8),
    ]
    for i, p in enumerate(panels):
        p["id"] = i + 1
    return {
        "title": "keda-llm: LLM serving load and autoscaling",
        "uid": "keda-llm",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "tags": ["keda-llm", "llm", "autoscaling"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus", "current": {}},
            variable("namespace", "label_values(llm_engine_up, namespace)", "namespace"),
            variable("model", 'label_values(llm_engine_up{namespace=~"$namespace"}, model)', "model"),
            variable("node", "label_values(llm_gpu_up, node)", "node"),
        ]},
        "panels": panels,
    }


def configmap(dashboard_json: str) -> str:
    """The dashboard as a ConfigMap for Grafana's dashboard sidecar (kube-prometheus-stack and the Grafana
    chart pick up ConfigMaps labelled grafana_dashboard in the namespaces they watch)."""
    import yaml

    doc = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "keda-llm-dashboard", "namespace": "keda-llm",
                        "labels": {"grafana_dashboard": "1", "app.kubernetes.io/part-of": "keda-llm"}},
           "data": {"keda-llm.json": dashboard_json}}
    return ("# GENERATED by deploy/grafana/build_dashboard.py from the same panels as dashboard.json.\n"
            + yaml.safe_dump(doc, sort_keys=False, width=1 << 20))


if __name__ == "__main__":
    out = Path(__file__).with_name("dashboard.json")
    text = json.dumps(build(), indent=2) + "\n"
    out.write_text(text)
    cm = Path(__file__).with_name("dashboard-configmap.yaml")
    cm.write_text(configmap(text))
    print(f"wrote {out.name} and {cm.name}")
