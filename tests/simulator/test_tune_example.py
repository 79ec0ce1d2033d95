"""deploy/examples/tuned/ ships what `keda-llm tune` wrote, and it measures what its header says.

Each file's header names the command that wrote it. The test rebuilds that command's trace, preset and SLO
with the tuner's own argument parser, checks the file is the tuner's candidate for the knobs it carries
(nothing edited by hand), and simulates the file as the sweep counted it (each of the command's seeds and
phases): SLO attainment and GPU-hours must be the header's (one simulation of the hour-long trace is about
1.5 CPU s; the full sweep that chose it is not re-run). The header's informed reactive line is replayed too:
the oracle planned as the tuner plans it, then the schedule at each hold and headroom (about 15 CPU s).
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from keda_llm.common.durations import parse_duration
from keda_llm.simulator.control.manifest import scaledobject_manifest
from keda_llm.simulator.report.frontier import with_seed
from keda_llm.simulator.report.reactive import replay, settings_pods
from keda_llm.simulator.tune import (
    Knobs,
    TuneResult,
    candidate,
    over_phases,
    over_seeds,
    phase_shifted,
    reactive_line,
    references,
    run_point,
)
from keda_llm.simulator.tune_cli import add_arguments, build

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples" / "tuned").glob("*.yaml"))


def _header(text: str) -> dict[str, str]:
    lines = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    return {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in lines if ":" in line}


def test_an_example_is_shipped() -> None:
    assert [p.name for p in EXAMPLES] == ["vllm-llama-8b.yaml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_example_is_the_tuners_output_and_measures_what_it_says(path: Path) -> None:
    text = path.read_text()
    head = _header(text)
    argv = shlex.split(head["Command"])
    assert argv[:2] == ["keda-llm", "tune"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(argv[2:])
    trace, bt, target, _, held = build(args)
    assert held is None  # the example was written without --holdout
    (swept,) = [v for k, v in head.items() if k.startswith("Knobs (")]
    knobs_text = dict(kv.split("=", 1) for kv in swept.rstrip(".").split(", "))
    doc = yaml.safe_load(text)
    cold = bt.preset.cold_start(bt.cold_start).quantile(0.9)
    sdd, ttft = knobs_text["scaleDownDelay"], knobs_text["targetTimeToFirstToken"]
    knobs = Knobs(itl_fraction=round(parse_duration(knobs_text["targetInterTokenLatency"]) / bt.slo.itl_s, 4),
                  kv_utilization=float(knobs_text["targetKVUtilization"]),
                  scale_down_delay=None if sdd == "adaptive" else parse_duration(sdd) / cold,
                  mode=knobs_text["mode"], min_replicas=int(knobs_text["minReplicaCount"]),
                  ttft_fraction=None if ttft == "unset" else round(parse_duration(ttft) / bt.slo.ttft_s, 4))
    assert doc == scaledobject_manifest(candidate(knobs, target, slo_itl_s=bt.slo.itl_s, cold_start_s=cold,
                                                  slo_ttft_s=bt.slo.ttft_s))
    # as the sweep counted it: each seed's mean over the control loop's phases, the worst seed at their mean cost
    point = over_seeds([over_phases([run_point(phase_shifted(trace, k, args.phases), with_seed(bt, seed), knobs, doc)
                                     for k in range(args.phases)])
                        for seed in range(args.seed, args.seed + args.seeds)])
    measured = re.match(r"([\d.]+)% of requests met the SLO at ([\d.]+) GPU-hours", head["Measured"])
    assert measured is not None
    assert f"{100 * point.attainment:.1f}" == measured.group(1)
    assert f"{point.gpu_hours:.2f}" == measured.group(2)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_informed_reactive_line_is_what_the_tuner_replays(path: Path) -> None:
    text = path.read_text()
    argv = shlex.split(_header(text)["Command"])
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(argv[2:])
    trace, bt, target, _, _ = build(args)
    bt = with_seed(replace(bt, max_replicas=target.max_replicas, scaledobject=None), args.seed)  # as tune() runs it
    *_, plan = references(trace, bt)
    points = tuple(replay(trace, bt, hold, room, pods) for hold, room, pods in settings_pods(plan, bt))
    result = TuneResult((), args.target, None, None, None, bt.resolved_mode(trace), reactive=points)
    line = reactive_line(result)
    assert line is not None and f"# {line}" in text.splitlines()
