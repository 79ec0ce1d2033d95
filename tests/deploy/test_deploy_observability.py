"""deploy/: the Prometheus rules pass promtool (with unit tests) and the dashboard is what its builder makes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from keda_llm.common.vocabulary import ENGINE_LAST_SUCCESS, ENGINE_METRICS, GPU_METRICS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs the Debian package 'prometheus'")
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    return tool


def test_rules_are_valid_for_promtool() -> None:
    out = subprocess.run([_promtool(), "check", "rules", str(DEPLOY / "prometheus" / "rules.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_rules_unit_tests_pass() -> None:
    out = subprocess.run([_promtool(), "test", "rules", "rules_test.yaml"], cwd=DEPLOY / "prometheus",
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_dashboard_json_is_what_the_builder_writes(tmp_path: Path) -> None:
    script = DEPLOY / "grafana" / "build_dashboard.py"
    copy = tmp_path / "build_dashboard.py"
    copy.write_text(script.read_text())
    subprocess.run([sys.executable, str(copy)], check=True, capture_output=True)
    assert (tmp_path / "dashboard.json").read_text() == (DEPLOY / "grafana" / "dashboard.json").read_text()
    assert (tmp_path / "dashboard-configmap.yaml").read_text() == \
        (DEPLOY / "grafana" / "dashboard-configmap.yaml").read_text()


def test_dashboard_and_rules_use_only_exported_metric_names() -> None:
    exported = {m.name for m in ENGINE_METRICS + GPU_METRICS}
    exported |= {n + s for m in ENGINE_METRICS if m.type == "histogram" for n in [m.name]
                 for s in ("_bucket", "_sum", "_count")}
    exported |= {"llm_engine_up", "llm_engine_startup_seconds", "llm_gpu_up", "llm_exporter_scrape_errors_total",
                 ENGINE_LAST_SUCCESS}
    dashboard = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs.append((DEPLOY / "prometheus" / "rules.yaml").read_text())
    used = {name for e in exprs for name in re.findall(r"(?<![:\w])llm_[a-z0-9_]+(?![:\w])", e)}
    assert used - exported == set(), f"names that no exporter serves: {sorted(used - exported)}"


# ------------------------------------------------------------------------------- every rule tested

def _rules() -> list[dict[str, object]]:
    import yaml

    doc = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_every_recording_rule_and_alert_has_a_promtool_test() -> None:
    """A rule added without a test (an alert: one that fires and one that does not) fails here."""
    import yaml

    tests = yaml.safe_load((DEPLOY / "prometheus" / "rules_test.yaml").read_text())["tests"]
    exprs = {t["expr"] for group in tests for t in group.get("promql_expr_test", []) if t.get("exp_samples")}
    fired = {t["alertname"] for group in tests for t in group.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for group in tests for t in group.get("alert_rule_test", []) if not t["exp_alerts"]}
    records = {str(r["record"]) for r in _rules() if "record" in r}
    alerts = {str(r["alert"]) for r in _rules() if "alert" in r}
    assert records - exprs == set(), f"recording rules without a promql_expr_test: {sorted(records - exprs)}"
    assert alerts - fired == set(), f"alerts never shown firing: {sorted(alerts - fired)}"
    assert alerts - quiet == set(), f"alerts never shown quiet: {sorted(alerts - quiet)}"


def test_every_alert_has_a_runbook_section() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
               for h in re.findall(r"^#+ (.+)$", runbook, re.M)}
    for rule in _rules():
        if "alert" in rule:
            annotations = rule["annotations"]
            assert isinstance(annotations, dict)
            link = str(annotations.get("runbook", ""))
            assert link == f"docs/runbook.md#{str(rule['alert']).lower()}", rule["alert"]
            assert link.split("#")[1] in anchors, f"docs/runbook.md has no section for {rule['alert']}"


#: Scaler metrics the rules use that the scaler does not export yet (see docs/runbook.md, LLMActivationRejected):
#: the alert stays silent until it does. The test below fails once it exists, so this list is emptied.
PENDING_SCALER_METRICS: set[str] = set()


def test_rules_and_dashboard_use_only_metrics_the_scaler_exports() -> None:
    from keda_llm.scaler.service import ServiceMetrics

    registry = ServiceMetrics().registry
    exported = {m.name for m in registry.collect()}
    exported |= {m.name + "_total" for m in registry.collect() if m.type == "counter"}
    dashboard = (DEPLOY / "grafana" / "dashboard.json").read_text()
    text = (DEPLOY / "prometheus" / "rules.yaml").read_text() + dashboard
    used = set(re.findall(r"keda_llm_scaler_[a-z_]+", text))
    assert used - exported - PENDING_SCALER_METRICS == set()
    assert PENDING_SCALER_METRICS & exported == set(), "the scaler exports it now: drop it from PENDING"


def test_dashboard_configmap_carries_the_dashboard_for_the_sidecar() -> None:
    import yaml

    cm = yaml.safe_load((DEPLOY / "grafana" / "dashboard-configmap.yaml").read_text())
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["keda-llm.json"] == (DEPLOY / "grafana" / "dashboard.json").read_text()


def test_scrape_configs_match_the_monitors_and_the_alerts_jobs() -> None:
    import yaml

    cfg = yaml.safe_load((DEPLOY / "prometheus" / "scrape-configs.yaml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    # the activator's job (overlays/activator) carries no alert: it is there for the activationQuery
    assert set(jobs) == {"keda-llm-exporter", "keda-llm-scaler", "keda-llm-activator"}
    rules = (DEPLOY / "prometheus" / "rules.yaml").read_text()
    for name, job in jobs.items():
        assert job["honor_labels"] is True
        assert name == "keda-llm-activator" or f'up{{job="{name}"}}' in rules
    assert jobs["keda-llm-exporter"]["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["keda-llm-exporter"]
    assert jobs["keda-llm-scaler"]["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["keda-llm"]
    assert jobs["keda-llm-exporter"]["relabel_configs"][0]["regex"] == "metrics"
    assert jobs["keda-llm-scaler"]["relabel_configs"][0]["regex"] == "http"


def test_scrape_configs_tls_variant_for_overlays_tls(tmp_path: Path) -> None:
    """The commented `# overlays/tls` lines, uncommented, make the scaler and exporter jobs scrape over https
    with the CA and the Service name the TLS overlay's certificates carry; promtool accepts the result
    (Debian's promtool has no Kubernetes discovery, so the check swaps it for a static target)."""
    import yaml

    text = (DEPLOY / "prometheus" / "scrape-configs.yaml").read_text()
    marked = [line for line in text.splitlines() if line.rstrip().endswith("# overlays/tls")]
    assert len(marked) == 8
    tls_text = "\n".join(line.replace("# ", "", 1).split("  #")[0] if line in marked else line
                         for line in text.splitlines()) + "\n"
    certs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(
        (DEPLOY / "overlays" / "tls" / "certificates.yaml").read_text())}
    cas = set()
    for name in ("keda-llm-scaler", "keda-llm-exporter"):
        job = {j["job_name"]: j for j in yaml.safe_load(tls_text)["scrape_configs"]}[name]
        assert job["scheme"] == "https"
        assert job["tls_config"]["ca_file"].endswith("/ca.crt")
        cas.add(job["tls_config"]["ca_file"])
        plain = {j["job_name"]: j for j in yaml.safe_load(text)["scrape_configs"]}[name]
        assert {k: v for k, v in job.items() if k not in ("scheme", "tls_config")} == plain and "scheme" not in plain
        cert = certs[f"{name}-tls"]
        assert job["tls_config"]["server_name"] in cert["spec"]["dnsNames"]
        assert "insecure_skip_verify" not in job["tls_config"]
    # one CA file serves both: the two certificates come from one issuer
    assert len(cas) == 1 and certs["keda-llm-scaler-tls"]["spec"]["issuerRef"] == certs[
        "keda-llm-exporter-tls"]["spec"]["issuerRef"]

    ca = tmp_path / "ca.crt"
    ca.write_text("")  # promtool checks that the file exists, not what it holds
    cfg = yaml.safe_load(tls_text)
    for j in cfg["scrape_configs"]:
        j.pop("kubernetes_sd_configs")
        j["static_configs"] = [{"targets": ["127.0.0.1:9091"]}]
        if "tls_config" in j:
            j["tls_config"]["ca_file"] = str(ca)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    out = subprocess.run([_promtool(), "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
