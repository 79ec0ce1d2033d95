"""A fluid-mode result at the edge of the KV cache says so (simulator/report/fidelity.py): in `keda-llm
simulate`'s report and results, and in the tuner's report and the header of the ScaledObject it writes.

The real runs: the first 10 minutes of azure2023-conv on the KV-bound L4 preset (a 30,816-token cache) preempt
for a fifth or more of their requests under `queue`; on 8B H100, with 11 times the cache, nothing preempts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keda_llm.simulator.report.fidelity import EDGE_SHARE, EdgeRun, at_kv_edge, kv_edge_caveat, requests_run
from keda_llm.simulator.tune import Knobs, Point, TuneResult, fidelity_note, over_seeds, render_yaml
from keda_llm.simulator.workload.traces import load_shipped


def test_only_fluid_runs_past_the_share_are_at_the_edge() -> None:
    n = 10_000
    runs = [("none", 0, n), ("at", int(EDGE_SHARE * n), n), ("past", int(EDGE_SHARE * n) + 1, n), ("empty", 5, 0)]
    assert at_kv_edge("fluid", runs) == [EdgeRun("past", 101, n)]
    assert at_kv_edge("detailed", runs) == []  # the detailed engine preempts as vLLM V1 does: nothing to say
    assert kv_edge_caveat([]) is None


def test_the_caveat_names_the_worst_run_and_the_check() -> None:
    one = kv_edge_caveat([EdgeRun("queue", 790, 2867)])
    assert one is not None
    assert "(queue: 790 preemptions, 27.6% of its requests)" in one and "--mode detailed" in one
    many = kv_edge_caveat([EdgeRun(f"p{i}", 100 + i, 1000) for i in range(6)])
    assert many is not None
    assert "p0, p1, p2, p3 and 2 more; the most, p5: 105 preemptions, 10.5% of its requests" in many


def test_the_share_counts_the_lead_in_the_preemptions_count() -> None:
    window = load_shipped("azure2023-conv").window(0.0, 600.0)
    led = window.wrapped(300.0)  # its own last 300 s first, unscored, as the tables and the CLI run it
    assert led.lead is not None and requests_run(led) == len(window) + len(led.lead) > len(window)
    assert requests_run(window) == len(window)


def _simulate(tmp_path: Path, preset: str) -> tuple[str, dict[str, object]]:
    from keda_llm.cli import main

    out = tmp_path / preset.replace("/", "-")
    assert main(["simulate", "--trace", "azure2023-conv", "--window", "0:600", "--preset", preset, "--mode",
                 "fluid", "--policies", "queue", "--quiet", "--out", str(out)]) == 0
    return str(out), json.loads((out / "results.json").read_text())


def test_simulate_warns_where_fluid_replicas_preempt_and_not_elsewhere(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, l4 = _simulate(tmp_path, "llama-3.1-8b/l4")
    err = " ".join(capsys.readouterr().err.split())  # rich wraps the line to the terminal
    (queue,) = l4["policies"]  # type: ignore[misc]
    assert l4["config"]["preemptions"]["queue"] > 0.2 * queue["requests"]  # type: ignore[index]
    assert "warning: the fluid mode ran replicas at the edge of their KV cache (queue:" in err
    assert l4["config"]["caveats"] and "edge of their KV cache" in l4["config"]["caveats"][0]  # type: ignore[index]
    _, h100 = _simulate(tmp_path, "llama-3.1-8b/h100")
    assert "edge of their KV cache" not in capsys.readouterr().err
    assert h100["config"]["preemptions"] == {"queue": 0} and h100["config"]["caveats"] == []  # type: ignore[index]


def _point(preemptions: int, requests: int = 2867) -> Point:
    return Point(Knobs(), {"kind": "ScaledObject"}, 0.99, 1.0, 1, 0.0, preemptions, requests)


def test_the_tuner_says_so_in_the_written_header_when_its_pick_preempts() -> None:
    trace = load_shipped("azure2023-conv")
    from keda_llm.simulator.hardware.presets import get_preset
    from keda_llm.simulator.run import Backtest

    bt = Backtest(get_preset("llama-3.1-8b/l4"))
    assert over_seeds([_point(10), _point(700), _point(3)]).preemptions == 700  # the worst seed's
    edge = TuneResult((_point(700),), 0.99, None, None, None, "fluid")
    note = fidelity_note(edge)
    assert note is not None and "the written pick: 700 preemptions, 24.4% of its requests" in note
    head = [line for line in render_yaml(edge, trace=trace, backtest=bt).splitlines() if line.startswith("#")]
    assert any(line.startswith("# NOTE: the fluid mode ran replicas at the edge") for line in head)
    for quiet in (TuneResult((_point(700),), 0.99, None, None, None, "detailed"),
                  TuneResult((_point(3),), 0.99, None, None, None, "fluid")):
        assert fidelity_note(quiet) is None
        assert "edge of their KV cache" not in render_yaml(quiet, trace=trace, backtest=bt)
