"""What the cold-start levers buy: ours (the scaler's policy through KEDA+HPA) with and without each lever.

    .venv/bin/python scripts/warming_table.py [--quick] [--out FILE]

Same preset, SLO and trace window as scripts/simulator_table.py's Azure 2024 code case (minutes 600-960
of the week, 6 hours). Four cold-start distributions (simulator/hardware/coldstart.py), in a cluster where a
scale-up without placeholder capacity waits for a new GPU node:

- none:    node provisioning + image + weights from network storage + engine init
- weights: the weights phase read from the page cache (the scaler's `warmPath`, the exporter's /v1/warm)
- nodes:   no node provisioning (placeholder capacity: the scaler's `warmCapacity` answer)
- both

Each lever is applied to every cold start: the upper bound of what it buys (in production a warm
reaches at most `warmNodes` nodes and placeholders are capped by `warmCapacityMax`). The ScaledObject's
`coldStart` is each distribution's p90, as the scaler's measured horizon would be. Prints Markdown.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from keda_llm.simulator.hardware.coldstart import ColdStartModel, cold_start_model
from keda_llm.simulator.hardware.presets import Preset, get_preset
from keda_llm.simulator.report.summary import Slo, summarize
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.workload.traces import load_shipped

PRESET = "llama-3.1-70b/h100-tp4"
SLO = Slo(ttft_s=2.0, itl_s=0.1)
WINDOW = (600 * 60.0, 960 * 60.0)
SCENARIOS = {"none": (False, False), "weights": (False, True), "nodes": (True, False), "both": (True, True)}


@dataclass(frozen=True)
class Recording(ColdStartModel):
    """A ColdStartModel that keeps every cold start it draws for the cluster (their sum is the table's)."""

    drawn: list[float] = field(default_factory=list, compare=False)

    def sample_phases(self, rng: np.random.Generator) -> dict[str, float]:
        phases = super().sample_phases(rng)
        self.drawn.append(sum(phases.values()))
        return phases


@dataclass(frozen=True)
class LeverPreset(Preset):
    node_free: bool = False
    weights_warm: bool = False
    recording: Recording | None = None

    def cold_start(self, case: str = "typical") -> ColdStartModel:
        if self.recording is not None:
            return self.recording
        return cold_start_model(self.model.weight_bytes / self.tp, "typical", node_free=self.node_free,
                                weights_warm=self.weights_warm)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the window's first 20 minutes only")
    ap.add_argument("--out", default=None)
    ap.add_argument("--seeds", type=int, default=5, help="runs per scenario (seeds 0..N-1), averaged")
    args = ap.parse_args()
    trace = load_shipped("azure2024-code").window(*WINDOW)
    if args.quick:
        trace = trace.window(0.0, 1200.0)
    base = get_preset(PRESET)
    rows = []
    for name, (node_free, warm) in SCENARIOS.items():
        plain = LeverPreset(**{f: getattr(base, f) for f in base.__dataclass_fields__},
                            node_free=node_free, weights_warm=warm)
        model = plain.cold_start()
        rec = Recording(model.case, model.phases)
        preset = LeverPreset(**{f: getattr(base, f) for f in base.__dataclass_fields__},
                             node_free=node_free, weights_warm=warm, recording=rec)
        t0 = time.process_time()
        slos, gpus = [], []
        for seed in range(args.seeds):
            (result,), _ = run_policies(trace, Backtest(preset, cold_start="typical", slo=SLO, seed=seed), ["ours"])
            s = summarize(result, SLO)
            slos.append(s.slo_attainment)
            gpus.append(s.gpu_hours)
        drawn = rec.drawn
        k = args.seeds
        rows.append((name, model.quantile(0.5), model.quantile(0.9), len(drawn) / k, float(np.sum(drawn)) / k,
                     float(np.mean(slos)), float(np.mean(gpus)), time.process_time() - t0))
        print(rows[-1], flush=True)
    none_mean = rows[0][4] / max(rows[0][3], 1)
    none_slo, none_gpu = rows[0][5], rows[0][6]
    cut = ", first 20 min" if args.quick else ""
    lines = [
        f"Trace azure2024-code, minutes 600-960 of the week ({len(trace)} requests{cut}), preset {PRESET}, "
        f"SLO TTFT <= {SLO.ttft_s:g} s and mean ITL <= {SLO.itl_s:g} s, policy ours; "
        f"per run, the mean of seeds 0-{args.seeds - 1}.",
        "",
        "| levers | cold start median / p90 (s) | cold starts | mean cold start s (saved per start) | "
        "cold-start s in all | SLO (points vs none) | GPU-hours (vs none) | CPU s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, med, p90, n, total, slo, gpu, cpu in rows:
        mean = total / max(n, 1)
        lines.append(f"| {name} | {med:.0f} / {p90:.0f} | {n:.1f} | {mean:.0f} ({none_mean - mean:+.0f}) | "
                     f"{total:.0f} | "
                     f"{100 * slo:.2f}% ({100 * (slo - none_slo):+.2f}) | {gpu:.1f} ({gpu - none_gpu:+.1f}) | "
                     f"{cpu:.0f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
