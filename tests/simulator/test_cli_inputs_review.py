"""`simulate` and `tune` on inputs a review found mishandled (2026-12-01): each case failed before its fix (the
user's trace written over, a traceback after the sweep, hundreds of GiB asked for, a pick tuned on no traffic
written with exit 0, a flag silently ignored, a Ctrl-C that left half a run).

The runs that reach a sweep take the first minute of azure2023-code with no lead-in, the 4-candidate `--quick`
grid, no oracle and one worker: about a second each.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from keda_llm.cli import main
from keda_llm.simulator.workload.history import Minute

SLO = ["--slo-ttft", "2", "--slo-itl", "0.1"]
FAST = ["--window", "0:60", "--lead-in", "0", *SLO, "--quick", "--no-oracle", "--workers", "1", "--quiet"]
SIM_FAST = ["--window", "0:60", "--lead-in", "0", "--policies", "static", "--quiet"]


def _refused(capsys: pytest.CaptureFixture[str], rc: int, prog: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"keda-llm {prog}: error: "), lines[0]
    return lines[0]


def _trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "traffic.csv"
    rows = ["timestamp,prompt_tokens,output_tokens"] + [f"{i * 0.5:.1f},{200 + i},{50 + i % 7}" for i in range(120)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("second", ["--out", "--plot"])
def test_tune_refuses_to_write_over_its_own_trace_or_one_output_over_another(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], second: str) -> None:
    trace = _trace_file(tmp_path)
    before = trace.read_bytes()
    rc = main(["tune", "--trace", str(trace), *FAST, "--out", str(trace)])
    assert "--trace and --out name the same file" in _refused(capsys, rc, "tune")
    assert trace.read_bytes() == before  # was: YAML, and the traffic gone
    same = tmp_path / "same.png"
    args = ["--out", str(same), "--plot", str(same)] if second == "--plot" else ["--out", str(same)]
    rc = main(["tune", "--trace", "azure2023-code", *FAST, *args, *(["--plot", str(same)] if second == "--out"
                                                                     else [])])
    assert "--out and --plot name the same file" in _refused(capsys, rc, "tune")
    assert not same.exists()


def test_tune_says_it_overwrote_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "so.yaml"
    out.write_text("old\n")
    assert main(["tune", "--trace", "azure2023-code", *FAST, "--out", str(out)]) in (0, 1)
    assert f"overwrote {out}" in capsys.readouterr().err
    assert yaml.safe_load(out.read_text())["kind"] == "ScaledObject"


def test_a_plot_format_that_needs_an_outside_program_is_refused_before_the_sweep(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # was accepted, then after the sweep: RuntimeError: 'xelatex' not found (a traceback, exit 1)
    rc = main(["tune", "--trace", "azure2023-code", *FAST, "--out", str(tmp_path / "so.yaml"),
               "--plot", str(tmp_path / "f.pgf")])
    assert ".pgf is not an image format" in _refused(capsys, rc, "tune")
    assert not (tmp_path / "so.yaml").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--slo-itl", "1e9"], "the TTFT SLO must be 0.01-3600 s and the ITL SLO 0.001-60 s"),  # 507 GiB
    (["--slo-ttft", "1e308"], "the TTFT SLO must be"),  # Maximum allowed dimension exceeded
    (["--stretch", "1e8"], "--stretch 1e+08: the trace would last"),  # 313 GiB
    (["--mode", "fluid", "--fluid-dt", "1e12"], "--fluid-dt 1e+12: must be more than 0 and at most 10 s"),  # a hang
    (["--rate-scale", "0.0001"], "--rate-scale 0.0001: no request is left"),  # "100% of the SLO at 0 GPU-h", exit 0
    (["--time-unit", "ms"], "--time-unit: applies to a CSV/JSONL file, not to the shipped trace"),  # ignored
    (["--time-column", "x", "--format", "csv"], "--time-column, --format: apply to a CSV/JSONL file"),
])
def test_simulate_refuses_absurd_or_unused_values_in_one_line(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--trace", "azure2023-code", *SIM_FAST, *argv])
    assert message in _refused(capsys, rc, "simulate")


def test_tune_refuses_a_thinned_away_trace_and_an_endless_since(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["tune", "--trace", "azure2023-code", *FAST, "--rate-scale", "0.0001"])
    assert "no request is left" in _refused(capsys, rc, "tune")
    # refused before any query (Prometheus is not even there): 500 days were read whole first
    rc = main(["tune", "--from-prometheus", "http://127.0.0.1:1", "--model", "m", *SLO, "--quick",
               "--since", "500d"])
    assert "--since 500d: 500 days; a history spans at most 400" in _refused(capsys, rc, "tune")
    rc = main(["tune", "--from-prometheus", "http://127.0.0.1:1", "--model", "m", *SLO, "--quick",
               "--time-column", "ts"])
    assert "--time-column applies to a --trace file, not to --from-prometheus" in _refused(capsys, rc, "tune")


def _minutes(tokens: bool, requests: float = 3.0) -> list[Minute]:
    t0 = 1_780_000_000 - 1_780_000_000 % 60
    return [Minute(t0 + 60 * i, requests, 900.0 if tokens else 0.0, 200.0 if tokens else 0.0) for i in range(120)]


def test_tune_refuses_a_history_with_requests_but_no_tokens(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # was: every request replayed with one token, "100% of requests met the SLO", the ScaledObject written, exit 0
    import keda_llm.simulator.workload.history as history

    monkeypatch.setattr(history, "export_minutes", lambda *a, **k: _minutes(tokens=False))
    rc = main(["tune", "--from-prometheus", "http://prom:9090", "--model", "m", *SLO, "--quick", "--since", "2h"])
    line = _refused(capsys, rc, "tune")
    assert "requests but no tokens" in line and "llm_prompt_tokens_total" in line


def test_an_error_in_a_prometheus_history_names_prometheus_not_a_temporary_file(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import keda_llm.simulator.workload.history as history

    monkeypatch.setattr(history, "export_minutes", lambda *a, **k: _minutes(tokens=True, requests=0.0001))
    rc = main(["tune", "--from-prometheus", "http://prom:9090", "--model", "m", *SLO, "--quick", "--since", "2h"])
    line = _refused(capsys, rc, "tune")
    assert "Prometheus at http://prom:9090, model 'm', the last 2h: " in line
    assert "/tmp" not in line and ".csv" not in line, line


def test_a_ctrl_c_while_the_plot_is_drawn_leaves_nothing_half_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import keda_llm.simulator.tune as tune_module

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_module, "plot", interrupted)
    out, png = tmp_path / "so.yaml", tmp_path / "f.png"
    assert main(["tune", "--trace", "azure2023-code", *FAST, "--out", str(out), "--plot", str(png)]) == 130
    assert "interrupted: nothing written" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # was: so.yaml written, no plot


def test_simulate_writes_its_three_files_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import keda_llm.simulator.report.summary as summary

    out = tmp_path / "run"
    assert main(["simulate", "--trace", "azure2023-code", *SIM_FAST, "--out", str(out)]) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(first) == ["config.json", "replicas.png", "results.json"]

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(summary, "plot", interrupted)
    assert main(["simulate", "--trace", "azure2023-code", *SIM_FAST, "--seed", "1", "--out", str(out)]) == 130
    # was: this run's JSON beside the last run's plot; now the last run's three, whole, and no part files
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


def test_the_written_command_runs_from_where_tune_was_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "traces").mkdir()
    shutil.copy(_trace_file(tmp_path), tmp_path / "traces" / "traffic.csv")
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "--trace", "traces/traffic.csv", *SLO, "--quick", "--no-oracle", "--workers", "1",
                 "--quiet", "--lead-in", "0", "--out", "so.yaml"]) in (0, 1)
    command = next(line for line in Path("so.yaml").read_text().splitlines() if line.startswith("# Command:"))
    assert "--trace traces/traffic.csv" in command  # was `--trace traffic.csv`: unknown trace from here


def test_two_scaledobjects_in_one_file_name_the_flag_that_picks_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "keda-2.18" / "llama-70b-h100-tp4.yaml"
    text = doc.read_text()
    two = tmp_path / "two.yaml"
    two.write_text(text + "\n---\n" + text.replace("name: llama-70b\n", "name: llama-70b-b\n", 1))
    rc = main(["simulate", "--trace", "azure2023-code", *SIM_FAST, "--policies", "ours", "--scaledobject", str(two)])
    line = _refused(capsys, rc, "simulate")
    assert "--scaledobject-name" in line and "name=" not in line.replace("--scaledobject-name", ""), line
