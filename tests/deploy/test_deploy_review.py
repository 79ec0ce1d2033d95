"""deploy/ and the operator docs as a stranger follows them: what each one says it does, it does.

- An example ScaledObject that allows zero (`minReplicaCount` 0, KEDA's default) can get there: without
  `scaleToZero: "true"` the scaler's IsActive is always true and KEDA's HPA keeps one replica.
- The exporter config example of docs/exporter-config.md, copied into deploy/base's ConfigMap, reads the
  warm token where the DaemonSet mounts the Secret.
- Without the Prometheus Operator, prometheus/scrape-configs.yaml scrapes what the monitors scrape,
  the activator's admin port included (its held-requests gauge is the activationQuery).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from test_deploy_manifests import (
    ACTIVATOR,
    BASE,
    DEPLOY,
    EXAMPLE_FILES,
    PROM_OP,
    ROOT,
    build,
    container,
    find,
    load_docs,
)

from keda_llm.exporter.config import parse_config
from keda_llm.scaler.config import parse_metadata

JSON = dict[str, Any]


def _scaled_objects() -> list[tuple[Path, JSON]]:
    return [(p, d) for p in EXAMPLE_FILES for d in load_docs(p) if d["kind"] == "ScaledObject"]


@pytest.mark.parametrize("path_doc", _scaled_objects(),
                         ids=lambda pd: f"{pd[0].relative_to(DEPLOY).as_posix()}:{pd[1]['metadata']['name']}")
def test_an_example_that_allows_zero_can_reach_it(path_doc: tuple[Path, JSON]) -> None:
    """minReplicaCount 0 with an IsActive that is always true is a floor of one in disguise (KEDA scales to
    zero only on IsActive false; the HPA's own floor is 1). pools-variants.yaml held an idle H100 so."""
    path, doc = path_doc
    if doc["spec"].get("minReplicaCount", 0) != 0:
        return
    for trigger in doc["spec"]["triggers"]:
        cfg = parse_metadata(trigger["metadata"])
        assert cfg.scale_to_zero, (f"{path.name} {doc['metadata']['name']}: minReplicaCount 0 without "
                                   f"scaleToZero \"true\" on trigger {trigger.get('name')!r} never reaches zero")


def test_a_variant_table_keeps_one_replica_of_the_model_or_can_wake_it() -> None:
    """The variants of one model may all allow zero only where something wakes the model again (an
    activationQuery, or an external-push trigger an activation reaches); else one of them holds the floor."""
    by_model: dict[tuple[str, str], list[JSON]] = {}
    for _, doc in _scaled_objects():
        (trigger,) = doc["spec"]["triggers"]
        cfg = parse_metadata(trigger["metadata"])
        if cfg.variants:
            by_model.setdefault((doc["metadata"]["namespace"], cfg.model), []).append(doc)
    assert by_model, "pools-variants.yaml is the example this checks"
    for model, docs in by_model.items():
        floors = [d["spec"].get("minReplicaCount", 0) for d in docs]
        wakes = [t["type"] == "external-push" or "activationQuery" in t["metadata"]
                 for d in docs for t in d["spec"]["triggers"]]
        assert max(floors) >= 1 or any(wakes), f"{model}: every variant may reach zero and nothing wakes it"


def _doc_yaml_block(doc: Path, after: str) -> JSON:
    match = re.search(re.escape(after) + r"\s*```yaml\n(.*?)```", doc.read_text(), re.S)
    assert match, f"{doc.name}: no yaml block after {after!r}"
    loaded: JSON = yaml.safe_load(match.group(1))
    return loaded


def test_the_exporter_docs_warm_example_reads_the_token_where_deploy_mounts_it() -> None:
    """docs/exporter-config.md's example turned warm on with a token path nothing mounts: copied into the
    ConfigMap, every POST /v1/warm would be refused."""
    example = parse_config(_doc_yaml_block(ROOT / "docs" / "exporter-config.md", "Example:"), env={"NODE_NAME": "n"})
    ds = find(build(BASE), "DaemonSet", "keda-llm-exporter", "keda-llm-exporter")
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in container(ds, "exporter")["volumeMounts"]
                if volumes[m["name"]].get("secret", {}).get("secretName") == "keda-llm-warm-token"]
    (item,) = volumes[mount["name"]]["secret"]["items"]
    mounted = str(PurePosixPath(mount["mountPath"]) / item["path"])
    assert example.warm.token_file == mounted
    cm = find(build(BASE), "ConfigMap", "keda-llm-exporter", "keda-llm-exporter")
    assert parse_config(yaml.safe_load(cm["data"]["exporter.yaml"]), env={"NODE_NAME": "n"}).warm.token_file == mounted


def _scrape_jobs() -> dict[str, JSON]:
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "scrape-configs.yaml").read_text())
    return {j["job_name"]: j for j in cfg["scrape_configs"]}


def _monitors() -> list[JSON]:
    found = [d for d in build(PROM_OP) if d["kind"] in ("ServiceMonitor", "PodMonitor")]
    found += [d for p in EXAMPLE_FILES for d in load_docs(p) if d["kind"] in ("ServiceMonitor", "PodMonitor")]
    return found


def test_every_monitor_has_its_scrape_job_for_a_prometheus_without_the_operator() -> None:
    """README: without the Operator, prometheus/scrape-configs.yaml. The activator's PodMonitor had no job
    there, so its held-requests gauge (the activationQuery at zero) never reached such a Prometheus."""
    jobs = _scrape_jobs()
    workloads = {d["metadata"]["name"]: d for d in build(ACTIVATOR) if d["kind"] in ("Deployment", "DaemonSet")}
    services = {d["metadata"]["name"]: d for d in build(ACTIVATOR) if d["kind"] == "Service"}
    monitors = _monitors()
    assert {m["metadata"]["name"] for m in monitors} == {"keda-llm-exporter", "keda-llm-scaler", "keda-llm-activator"}
    for monitor in monitors:
        spec = monitor["spec"]
        selected = spec["selector"]["matchLabels"]["app.kubernetes.io/name"]
        owner = services[selected] if monitor["kind"] == "ServiceMonitor" else None
        endpoints = spec.get("podMetricsEndpoints") or spec.get("endpoints")
        (endpoint,) = endpoints
        port = endpoint["port"]
        if owner is not None:  # a ServiceMonitor names the Service's port: the pods' port behind it
            (svc_port,) = [p for p in owner["spec"]["ports"] if p["name"] == port]
            port = svc_port["targetPort"]
        workload = workloads[selected]
        job_name = workload["spec"]["template"]["metadata"]["labels"][spec["jobLabel"]]
        assert job_name in jobs, f"scrape-configs.yaml has no job {job_name!r} for the {monitor['kind']}"
        job = jobs[job_name]
        (sd,) = job["kubernetes_sd_configs"]
        assert sd["role"] == "pod" and sd["namespaces"]["names"] == spec["namespaceSelector"]["matchNames"]
        assert [s["label"] for s in sd["selectors"]] == [f"app.kubernetes.io/name={selected}"]
        keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        assert [r["regex"] for r in keep] == [port]
        ports = [p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
        assert port in ports
        assert job["honor_labels"] is bool(endpoint.get("honorLabels"))
