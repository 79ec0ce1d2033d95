"""`keda-llm simulate` end to end on a small CSV and a real ScaledObject, and its errors on bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from keda_llm.cli import main
from keda_llm.simulator import cli
from keda_llm.simulator.hardware.presets import ConfigError, get_preset

FIXTURES = Path(__file__).parents[1] / "fixtures" / "scaledobjects"


def _csv(tmp_path: Path, rows: list[tuple[float, int, int]]) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text("t,in,out\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows))
    return p


def _args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(extra))


def test_backtest_of_a_scaledobject_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _csv(tmp_path, [(i * 0.5, 200, 20) for i in range(120)])  # 2 requests/s for a minute
    out = tmp_path / "out"
    rc = main(["simulate", "--trace", str(trace), "--time-column", "t", "--prompt-column", "in",
               "--output-column", "out", "--scaledobject", str(FIXTURES / "vllm-external.yaml"),
               "--policies", "ours,static,oracle", "--cold-start", "fast", "--out", str(out), "--quiet"])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text())
    rows = {r["policy"]: r for r in doc["policies"]}
    assert set(rows) == {"ours", "static", "oracle"}
    for r in rows.values():
        assert r["requests"] == 120 and r["served"] + r["dropped"] == 120
    assert rows["oracle"]["gpu_hours_vs_oracle"] == 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["scaledobject"]["name"] == "llama-8b"
    assert config["scaledobject"]["triggers"][0]["metadata"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert config["requests"] == 120 and config["preset"] == "llama-3.1-8b/h100"
    assert (out / "replicas.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "oracle" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--trace", "azure-2025"], "unknown trace 'azure-2025': not a shipped trace"),
    (["--trace", "azure-conv-2023", "--policies", "ours,magic"], "unknown policy 'magic'"),
    (["--trace", "azure-conv-2023", "--scaledobject", str(FIXTURES / "invalid-typo-and-bounds.yaml")],
     "invalid ScaledObject"),
    (["--trace", "azure-conv-2023", "--scaledobject", str(FIXTURES / "invalid-prometheus-trigger.yaml")],
     "prometheus"),
    (["--trace", "azure-conv-2023", "--scaledobject", "no-such-file.yaml"], "cannot read no-such-file.yaml"),
    (["--trace", "azure-conv-2023", "--window", "10:5"], "need 0 <= START < END"),
    (["--trace", "azure-conv-2023", "--slo-ttft", "0"], "--slo-ttft 0 / --slo-itl 0.1: the TTFT SLO must be 0.01"),
    (["--trace", "azure-conv-2023", "--lead-in", "-60"], "--lead-in -60: must be finite and >= 0"),
    (["--trace", "azure-conv-2023", "--lead-in", "nan"], "--lead-in nan: must be finite and >= 0"),
    # found by a flag fuzz: both were the router's ValueError traceback once the run had started
    (["--trace", "azure-conv-2023", "--max-wait", "nan"], "--max-wait nan: must be more than 0 seconds (inf: never"),
    (["--trace", "azure-conv-2023", "--max-wait", "-1"], "--max-wait -1: must be more than 0 seconds"),
    (["--trace", "azure-conv-2023", "--slo-itl", "1e400"], "--slo-itl inf: the TTFT SLO must be"),
    (["--trace", "azure-conv-2023", "--slo-ttft", "nan"], "--slo-ttft nan / --slo-itl 0.1: the TTFT SLO must be"),
    (["--trace", "azure-conv-2023", "--seed", "-1"], "--seed -1: must be >= 0"),
    (["--trace", "azure-conv-2023", "--max-replicas", "0"], "--max-replicas 0: must be >= 1"),
])
def test_bad_input_is_a_clear_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert "keda-llm simulate: error:" in err and message in err
    assert err.count("\n") == 1 and "; hint: " in err  # one line, saying what to do


def test_bad_trigger_metadata_names_key_and_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIXTURES / "vllm-external.yaml").read_text().replace("policy: tokens", "policy: vibes")
    so = tmp_path / "so.yaml"
    so.write_text(text)
    assert main(["simulate", "--trace", "azure-conv-2023", "--scaledobject", str(so)]) == 2
    assert "metadata key 'policy' = 'vibes'" in capsys.readouterr().err


def test_malformed_csv_trace_names_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("t,in,out\n0,10,5\n1,ten,5\n")
    rc = main(["simulate", "--trace", str(p), "--time-column", "t", "--prompt-column", "in", "--output-column", "out"])
    assert rc == 2
    assert "line 3, column in: not a whole number of tokens: 'ten'" in capsys.readouterr().err


def test_shipped_names_and_aliases_resolve() -> None:
    assert cli.load_trace(_args("--trace", "azure-code-2023")).name == "azure2023-code"
    t = cli.load_trace(_args("--trace", "azure-conv-2023", "--window", "0:600", "--stretch", "2"))
    assert t.duration_s <= 1200 and t.name.startswith("azure2023-conv[0s,600s)")


def test_the_trace_plays_its_own_end_first_unless_told_not_to() -> None:
    # the docs tables' rule (simulator/cluster/lead_in.py LEAD_IN_S): the shaped trace's last 30 minutes ride
    # along as an unscored lead-in; a 10-minute window is all lead-in; --lead-in 0 starts cold
    t = cli.load_trace(_args("--trace", "azure-code-2023"))
    assert t.lead is not None and t.lead_s == 1800.0 and len(t) == 8819
    assert t.lead.arrival_s.max() < 1800.0 and len(t.lead) == int((t.arrival_s >= t.duration_s - 1800.0).sum())
    w = cli.load_trace(_args("--trace", "azure-code-2023", "--window", "0:600"))
    assert w.lead is not None and w.lead_s == pytest.approx(w.duration_s) and len(w.lead) == len(w)
    cold = cli.load_trace(_args("--trace", "azure-code-2023", "--lead-in", "0"))
    assert cold.lead is None and len(cold) == 8819


def test_impossible_preset_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs more KV memory than the GPU has"):
        get_preset("llama-3.1-8b/h100").with_changes(kv_blocks_override=10**9)
    with pytest.raises(ConfigError, match="max_num_seqs must be >= 1, got 0"):
        get_preset("llama-3.1-8b/h100").with_changes(max_num_seqs=0)


@pytest.mark.parametrize("columns", [100, 120])
def test_the_table_fits_the_terminal_and_never_cuts_the_main_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """A 100- or 120-column terminal gets two tables (cost, then latency and scaling), every cell whole."""
    monkeypatch.setenv("COLUMNS", str(columns))
    trace = _csv(tmp_path, [(i * 0.5, 200, 20) for i in range(120)])
    rc = main(["simulate", "--trace", str(trace), "--time-column", "t", "--prompt-column", "in",
               "--output-column", "out", "--scaledobject", str(FIXTURES / "vllm-external.yaml"),
               "--policies", "ours,static,oracle", "--cold-start", "fast", "--quiet"])
    assert rc == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "…" not in captured.out  # nothing cut to an ellipsis
    ours = [line for line in lines if line.startswith("│ ours")]
    assert len(ours) == 2 and "120" in ours[0] and "x" in ours[0]  # served and the GPU-h ratios, whole
    assert "GPU-h" in captured.out and "TTFT p99" in captured.out and "/ bound" in captured.out
    assert "oracle: target met" in captured.err
