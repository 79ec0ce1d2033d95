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


# ------------------------------------------------- a second review (2026-12-02): spans, hints, --model, static


def _years_file(tmp_path: Path, kind: str) -> Path:
    """Epoch seconds with one row stamped 0 (a stray), or two rows 22 years apart."""
    path = tmp_path / f"{kind}.csv"
    t0 = 1_772_434_801.0
    rows = ["timestamp,prompt_tokens,output_tokens"]
    if kind == "stray-zero":
        rows += ["0,100,50"] + [f"{t0 + 2 * i:.1f},{200 + i},{50 + i % 7}" for i in range(60)]
    else:
        rows += ["1000000000,100,50", "1700000000,100,50"]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("kind", ["stray-zero", "22-years"])
@pytest.mark.parametrize("prog", ["simulate", "tune"])
def test_a_trace_that_spans_years_is_refused_before_the_run(kind: str, prog: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`20370 requests over 492345.50 h`, then no end: the 400-day bound was checked only under --stretch."""
    from keda_llm.simulator import cli as sim_cli
    from keda_llm.simulator import tune_cli

    def no_run(*_: Any, **__: Any) -> Any:  # (it ran with no end: here it fails at once)
        raise AssertionError("the run started on a trace that spans years")

    monkeypatch.setattr(sim_cli if prog == "simulate" else tune_cli, "execute", no_run)
    trace = _years_file(tmp_path, kind)
    extra = ["--quick", "--no-oracle", "--workers", "1", *SLO] if prog == "tune" else ["--policies", "static"]
    rc = main([prog, "--trace", str(trace), "--lead-in", "0", "--quiet", *extra])
    line = _refused(capsys, rc, prog)
    days = "20,514" if kind == "stray-zero" else "8,102"
    assert f"error: the trace spans {days} days (" in line and "; at most 400; hint: " in line, line
    assert "fix the stray timestamps or cut it with --window" in line, line
    if kind == "stray-zero":  # the window that keeps the requests after the stray row
        assert "e.g. --window 1772434801:1772434920 keeps the 60 requests after that gap" in line, line


def test_a_window_cuts_a_trace_that_spans_years_to_one_that_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    trace = _years_file(tmp_path, "stray-zero")
    rc = main(["simulate", "--trace", str(trace), "--window", "1772434801:1772434920", "--lead-in", "0",
               "--policies", "static", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert "60 requests over 0.03 h" in capsys.readouterr().err
    # a window that still spans years is refused too, naming it (it ran with no end: here it fails at once)
    from keda_llm.simulator import cli as sim_cli

    def no_run(*_: Any, **__: Any) -> Any:
        raise AssertionError("the run started on a window that spans years")

    monkeypatch.setattr(sim_cli, "execute", no_run)
    rc = main(["simulate", "--trace", str(trace), "--window", "0:1772434920", "--policies", "static", "--quiet"])
    assert "the trace of --window 0:1772434920 spans 20,514 days" in _refused(capsys, rc, "simulate")


def test_each_data_error_gets_a_hint_about_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 1e12 requests in one minute: "a history that long is a shorter span" (it was one minute)
    huge = tmp_path / "huge.csv"
    huge.write_text("minute,requests,prompt_tokens,output_tokens\n2026-01-01T00:00:00Z,1e12,1e15,1e14\n")
    line = _refused(capsys, main(["simulate", "--trace", str(huge), "--quiet"]), "simulate")
    assert "requests in all: at most" in line and "a history that long" not in line
    assert "hint: check the requests column: each row counts the requests of its minute" in line, line
    # unsorted rows: `--sort` was said twice, in the message and the hint
    unsorted = tmp_path / "unsorted.csv"
    unsorted.write_text("timestamp,prompt_tokens,output_tokens\n0,1,1\n10,1,1\n5,1,1\n")
    line = _refused(capsys, main(["simulate", "--trace", str(unsorted), "--quiet"]), "simulate")
    assert "timestamps not sorted" in line and line.count("--sort") == 1, line
    # years of per-minute history: "--help lists the flags"
    years = tmp_path / "years.csv"
    years.write_text("minute,requests,prompt_tokens,output_tokens\n2020-01-01T00:00:00Z,3,100,50\n"
                     "2026-01-01T00:00:00Z,3,100,50\n")
    line = _refused(capsys, main(["simulate", "--trace", str(years), "--quiet"]), "simulate")
    assert "a history spans at most 400 days" in line and "check the minute column for a stray date" in line


def test_the_layout_line_names_the_unit_it_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # was: `created (s), prompt_tokens, completion_tokens; times in ms`: two units for one column
    from keda_llm.simulator.cli import load_trace
    from keda_llm.simulator.tune_cli import add_arguments

    f = tmp_path / "gateway.jsonl"
    f.write_text('{"created": 1772434801000, "prompt_tokens": 5, "completion_tokens": 5}\n'
                 '{"created": 1772434802000, "prompt_tokens": 5, "completion_tokens": 5}\n')
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    tr = load_trace(parser.parse_args(["--trace", str(f), "--time-unit", "ms", "--lead-in", "0", *SLO]))
    assert tr.arrival_s.tolist() == [0.0, 1.0]
    said = capsys.readouterr().err
    assert "OpenAI usage's columns: created (ms, as --time-unit says), prompt_tokens, completion_tokens" in said
    assert "(s)" not in said and "times in" not in said, said


def test_tune_without_model_warns_and_says_so_in_the_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The preset's `Llama-3.1-8B` was written as the trigger's model and in its activationQuery, silently:
    no engine serves under that name unless started so. Optional still: a warning and a header note."""
    out = tmp_path / "so.yaml"
    rc = main(["tune", "--trace", "azure2023-code", *FAST, "--out", str(out)])
    assert rc in (0, 1)
    err = capsys.readouterr().err
    (warning,) = [line for line in err.splitlines() if "--served-model-name" in line]
    assert warning.startswith("warning: model 'Llama-3.1-8B' is the preset's model name (no --model given)")
    text = out.read_text()
    assert "# NOTE: model 'Llama-3.1-8B' is the preset's model name" in text and "--served-model-name" in text
    doc = yaml.safe_load(text)
    assert doc["spec"]["triggers"][0]["metadata"]["model"] == "Llama-3.1-8B"
    # with --model: neither
    rc = main(["tune", "--trace", "azure2023-code", *FAST, "--out", str(out), "--model", "my-model"])
    assert "--served-model-name" not in capsys.readouterr().err and "NOTE:" not in out.read_text()


def _result(static: tuple[float, float] | None, pick: tuple[float, float] = (0.9999, 2.08)) -> Any:
    from keda_llm.simulator.report.frontier import Reference
    from keda_llm.simulator.tune import Knobs, Point, TuneResult

    points = (Point(Knobs(), {}, pick[0], pick[1], 1, 0.0), Point(Knobs(min_replicas=2), {}, 0.98, 1.5, 0, 0.0))
    return TuneResult(points, 0.99, None, None if static is None else Reference(*static), None, "detailed")


def test_the_verdict_says_when_static_is_as_good_for_no_more_gpu_hours() -> None:
    from keda_llm.simulator.tune import static_line

    line = static_line(_result((0.9999, 2.00)))
    assert line is not None and "static provisioning at the peak meets the 99% target too" in line
    assert "99.99% at 2.00 GPU-hours: fewer GPU-hours than the pick (99.99% at 2.08)" in line, line
    assert "as many GPU-hours as" in (static_line(_result((0.995, 2.08))) or "")
    assert static_line(_result((0.9999, 2.10))) is None  # dearer
    # a hair over the pick in the last bits (the same figure printed): as many, not left out (found 2026-12-03:
    # the same traffic read from a CSV got the line and from whole-second JSONL times did not)
    assert "as many GPU-hours as" in (static_line(_result((0.995, 2.08 + 1e-12))) or "")
    assert static_line(_result((0.985, 1.00))) is None  # misses the target
    assert static_line(_result(None)) is None  # --no-oracle
    missed = static_line(_result((0.999, 1.5), pick=(0.97, 3.0)))  # no candidate met it: the best one swept
    assert missed is not None and "the best point swept (98.00% at 1.50, short of the target)" in missed


def test_tune_prints_the_static_line_in_its_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import keda_llm.simulator.tune as tune_mod

    real = tune_mod.tune

    def with_static(*args: Any, **kwargs: Any) -> Any:  # the sweep as run, static set beside it
        from dataclasses import replace

        from keda_llm.simulator.report.frontier import Reference

        got = real(*args, **kwargs)
        return replace(got, static=Reference(1.0, got.chosen.gpu_hours * 0.9))

    monkeypatch.setattr(tune_mod, "tune", with_static)
    rc = main(["tune", "--trace", "azure2023-code", *FAST, "--target", "0.5", "--model", "m",
               "--out", str(tmp_path / "so.yaml")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "recommended:" in out and "static provisioning at the peak meets the 50% target too" in out, out


def test_a_failed_call_among_answers_and_two_columns_alike_get_their_own_hints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a failed call with no `usage` past the first line: naming columns would not help (it was the hint)
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"created": 1764500000, "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n'
                       '{"created": 1764500002, "error": {"message": "rate limited"}}\n')
    assert main(["simulate", "--trace", str(answers), "--quiet"]) == 2
    said, line = capsys.readouterr().err.strip().splitlines()  # the layout it read, then the one-line error
    assert said.startswith("reading answers.jsonl as OpenAI usage's columns") and "Traceback" not in line
    assert "line 2: missing field 'usage.prompt_tokens' (the lines before have it)" in line
    assert "hint: a line past the first lacks the field (a failed call logged with no `usage`?)" in line, line
    alike = tmp_path / "alike.csv"
    alike.write_text("TIMESTAMP,Timestamp,prompt_tokens,output_tokens\n0,0,1,1\n")
    line = _refused(capsys, main(["simulate", "--trace", str(alike), "--quiet"]), "simulate")
    assert "all match 'timestamp' apart from case: --time-column names the one to read" in line
    assert "hint: name the column to read with its flag" in line, line
