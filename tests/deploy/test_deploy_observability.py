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

from keda_llm.common.vocabulary import ENGINE_METRICS, GPU_METRICS

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


def test_dashboard_and_rules_use_only_exported_metric_names() -> None:
    exported = {m.name for m in ENGINE_METRICS + GPU_METRICS}
    exported |= {n + s for m in ENGINE_METRICS if m.type == "histogram" for n in [m.name]
                 for s in ("_bucket", "_sum", "_count")}
    exported |= {"llm_engine_up", "llm_engine_startup_seconds", "llm_gpu_up", "llm_exporter_scrape_errors_total"}
    dashboard = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs.append((DEPLOY / "prometheus" / "rules.yaml").read_text())
    used = {name for e in exprs for name in re.findall(r"(?<![:\w])llm_[a-z0-9_]+(?![:\w])", e)}
    assert used - exported == set(), f"names that no exporter serves: {sorted(used - exported)}"
