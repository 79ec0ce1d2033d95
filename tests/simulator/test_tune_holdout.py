"""`keda-llm tune --holdout`: tune on a trace but its end, then run the pick on that end, which it was not
chosen on (simulator.tune.split_holdout, check_holdout).

The split is checked on arrays: the tuned part holds no held-out request, not even as its unscored lead-in,
and the held-out part starts after the traffic just before it. End to end, two synthetic traces on 8B/H100
(the quick grid, 95% target): a calm one whose end is as calm (the pick meets the target there too, exit 0)
and one whose last 10 minutes are a burst sixty times the rate with four times the prompts (the pick, tuned
on the calm part, meets 100% there and 42% on the burst: exit 3, said on the terminal and in the file).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from keda_llm.cli import main
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import Slo
from keda_llm.simulator.run import Backtest
from keda_llm.simulator.tune import Grid, Target, check_holdout, run_point, split_holdout, tune
from keda_llm.simulator.workload.traces import Trace, TraceError, load_shipped


def _trace(arrivals: list[float], lead_s: float = 0.0) -> Trace:
    n = len(arrivals)
    tr = Trace("t", np.asarray(arrivals, dtype=np.float64), np.arange(1, n + 1, dtype=np.int32),
               np.full(n, 10, dtype=np.int32))
    return tr.wrapped(lead_s) if lead_s > 0 else tr


def test_the_tuned_part_never_sees_the_held_out_requests() -> None:
    tr = _trace([float(t) for t in range(0, 1000, 50)], lead_s=300.0)  # 0, 50, ..., 950; lead-in: its own end
    fit, held = split_holdout(tr, 400.0)  # split at 550
    assert fit.arrival_s.tolist() == [float(t) for t in range(0, 550, 50)]
    assert fit.prompt_tokens.tolist() == list(range(1, 12))
    # the tuned part's lead-in is its own end (its last 300 s: 200-500 s), as a whole trace's is, not the
    # held-out traffic
    assert fit.lead is not None and fit.lead_s == 300.0
    assert fit.lead.prompt_tokens.tolist() == [5, 6, 7, 8, 9, 10, 11]
    # the held-out part: 550-950 s re-based to 0, after the 300 s of real traffic before it ([250, 550) s)
    assert held.arrival_s.tolist() == [float(t) for t in range(0, 401, 50)]
    assert held.prompt_tokens.tolist() == list(range(12, 21))
    assert held.lead is not None and held.lead_s == 300.0
    assert held.lead.prompt_tokens.tolist() == [6, 7, 8, 9, 10, 11]
    assert set(fit.prompt_tokens.tolist()).isdisjoint(held.prompt_tokens.tolist())


def test_without_a_lead_in_neither_part_has_one() -> None:
    fit, held = split_holdout(_trace([0.0, 100.0, 200.0, 300.0]), 150.0)  # split at 150 s
    assert (fit.lead, held.lead) == (None, None)
    assert (fit.arrival_s.tolist(), held.arrival_s.tolist()) == ([0.0, 100.0], [50.0, 150.0])


@pytest.mark.parametrize("span", [0.0, -1.0, 59.0, 300.0, 1000.0, math.nan, math.inf])
def test_a_span_under_a_minute_or_not_shorter_than_the_trace_is_refused(span: float) -> None:
    with pytest.raises(TraceError, match="holdout"):
        split_holdout(_trace([0.0, 100.0, 200.0, 300.0]), span)


def test_a_tuned_part_without_a_request_is_refused() -> None:
    # (the held-out part always holds the trace's last request: the trace ends at its last arrival)
    assert len(split_holdout(_trace([0.0, 10.0, 20.0, 1000.0]), 60.0)[1]) == 1
    with pytest.raises(TraceError, match="no request arrives in the part before it"):
        split_holdout(_trace([500.0, 990.0, 1000.0]), 990.0)  # the tuned part would be [0, 10)


def test_the_held_out_run_is_the_sweeps_pick_with_its_seeds_mode_and_replica_cap() -> None:
    # 20 minutes of azure2023-code on 8B/H100, the last 5 held out; one candidate, two seeds; the sweep in the
    # detailed mode and under a cap of 3 replicas, neither of which the held-out run may change
    tr = load_shipped("azure2023-code").window(0.0, 1200.0)
    bt = Backtest(get_preset("llama-3.1-8b/h100"), cold_start="fast", slo=Slo(2.0, 0.1), mode="detailed")
    fit, held = split_holdout(tr, 300.0)
    grid = Grid(itl_fraction=(0.5,), kv_utilization=(0.8,), scale_down_delay=(None,), mode=("reactive",),
                min_replicas=(1,), ttft_fraction=(0.5,))
    result = tune(fit, bt, Target(model="m", max_replicas=3), grid=grid, target=0.9, seeds=(0, 1),
                  with_references=False)
    assert (result.mode, result.max_replicas, result.seeds) == ("detailed", 3, (0, 1))
    h = check_holdout(result, held, replace(bt, mode="fluid", max_replicas=64), with_reference=False)
    c = result.chosen
    want = [run_point(held, replace(bt, seed=seed, max_replicas=3), c.knobs, c.manifest) for seed in (0, 1)]
    assert h.attainment == min(p.attainment for p in want)  # the worst seed ...
    assert h.gpu_hours == pytest.approx(sum(p.gpu_hours for p in want) / 2)  # ... at the mean GPU-hours
    assert h.oracle is None and h.met == (h.attainment >= 0.9)


def _write(path: Path, phases: list[tuple[float, float, float, int, int]]) -> Path:
    rng = np.random.default_rng(1)
    rows = []
    for start, end, rate, prompt, output in phases:
        t = start
        while (t := t + rng.exponential(1 / rate)) < end:
            rows.append(f"{t:.3f},{int(prompt * rng.uniform(0.6, 1.4))},{int(output * rng.uniform(0.6, 1.4))}")
    path.write_text("timestamp,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    return path


def _tune(trace: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["tune", "--trace", str(trace), "--preset", "llama-3.1-8b/h100", "--slo-ttft", "2", "--slo-itl", "0.1",
               "--target", "0.95", "--quick", "--holdout", "10m", "--workers", "2", "--quiet", "--no-oracle",
               "--lead-in", "300", "--out", str(out)])
    return rc, capsys.readouterr().out


def test_a_pick_that_holds_on_the_held_out_end_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _write(tmp_path / "calm.csv", [(0.0, 1800.0, 0.5, 500, 100)])
    rc, out = _tune(trace, tmp_path / "so.yaml", capsys)
    assert rc == 0, out
    said = [line for line in out.splitlines() if line.startswith("Held out")]
    assert len(said) == 1 and "meets the 95% target" in said[0], out
    assert f"# {said[0]}" in (tmp_path / "so.yaml").read_text()


def test_a_pick_that_misses_on_the_held_out_end_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _write(tmp_path / "burst.csv", [(0.0, 1200.0, 0.5, 500, 100), (1200.0, 1800.0, 30.0, 2000, 200)])
    rc, out = _tune(trace, tmp_path / "so.yaml", capsys)
    assert rc == 3, out
    assert "recommended: 100.0%" in out  # in sample, on the calm part, the pick meets the target
    said = [line for line in out.splitlines() if line.startswith("Held out")]
    assert len(said) == 1 and "MISSES the 95% target" in said[0], out
    held = float(said[0].split(": ")[2].split("%")[0])
    assert held < 90.0
    text = (tmp_path / "so.yaml").read_text()
    assert f"# {said[0]}" in text and "--holdout 10m" in text
