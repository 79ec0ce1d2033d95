"""Backtest: counting a degraded replica as partial capacity, against counting it as a whole one.

    .venv/bin/python scripts/degraded_backtest.py [--quick] [--update-docs] [--trace NAME ...]

Each one-hour Azure trace (default: azure2023-code and azure2023-conv) through the detailed simulator
with `ours` (the scaler's decide through the KEDA and HPA emulators), in three worlds: every replica
healthy; the oldest replica (replica-0, the one a scale-down keeps longest) runs at SPEED of its speed
from START to END as on a throttled GPU, and its exporter reports it
(`llm_replica_degraded{reason="gpu_throttled"}`); the same slowdown unreported, so only its token rate
shows it. The degraded worlds run twice: the scaler's defaults (degradedFraction 0.5, slowReplicaRatio
0.7) and with both rules off (degradedFraction 1, slowReplicaRatio 0): every replica counts whole, as
every autoscaler assumes. Each with two ScaledObjects: the default one with the latency targets (its
latency term already sees a slow replica through the engines' ITL), and the same without them
(capacity only: the count comes from the tokens policy alone). --update-docs writes the tables into
docs/degraded.md (the block between `<!-- generated:degraded -->` markers); --quick runs the first 20
minutes (a check of the script, with the spell scaled into them).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from keda_llm.simulator.cluster.engine import DegradedSpell
from keda_llm.simulator.control.policies import ITL_TARGET_FRACTION, default_scaledobject
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import Slo, Summary, summarize
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.workload.traces import load_shipped

DOC = Path(__file__).resolve().parent.parent / "docs" / "degraded.md"
PRESET = "llama-3.1-70b/h100-tp4"
SLO = Slo(ttft_s=2.0, itl_s=0.1)
SPEED, START, END = 0.6, 600.0, 3000.0  # replica-0 at 0.6x from minute 10 to minute 50
OFF = {"degradedFraction": "1", "slowReplicaRatio": "0"}


def settings(bt: Backtest, extra: dict[str, str], latency: bool) -> Backtest:
    """The backtest with ours' default ScaledObject, its trigger metadata extended by `extra`; `latency`: with
    the latency targets the backtests give it (TTFT at the SLO, ITL at half of it), else capacity only."""
    p = bt.preset
    so = default_scaledobject(p.model.name, max_replicas=bt.max_replicas,
                              cold_start_s=p.cold_start(bt.cold_start).quantile(0.9),
                              slo_ttft_s=bt.slo.ttft_s if latency else None,
                              slo_itl_s=bt.slo.itl_s * ITL_TARGET_FRACTION if latency else None)
    trigger = so.triggers[0]
    so = dataclasses.replace(so, triggers=(dataclasses.replace(trigger, metadata={**trigger.metadata, **extra}),))
    return dataclasses.replace(bt, scaledobject=so)


def run(trace_name: str, quick: bool, preset: str = PRESET) -> tuple[str, list[tuple[str, str, Summary]], float]:
    tr = load_shipped(trace_name)
    scale = 1.0
    if quick:
        tr = tr.window(0.0, 1200.0)
        scale = 1200.0 / 3600.0
    base = Backtest(get_preset(preset), cold_start="typical", slo=SLO, mode="detailed")
    spell = (START * scale, END * scale)
    worlds = [
        ("healthy", (), {}),
        ("throttled, reported: counted 0.5 (default)", (DegradedSpell(0, *spell, SPEED, True),), {}),
        ("throttled, reported: counted whole", (DegradedSpell(0, *spell, SPEED, True),), OFF),
        ("slow, unreported: rate rule (default)", (DegradedSpell(0, *spell, SPEED, False),), {}),
        ("slow, unreported: counted whole", (DegradedSpell(0, *spell, SPEED, False),), OFF),
    ]
    out: list[tuple[str, str, Summary]] = []
    t0 = time.process_time()
    for so_label, latency in (("latency targets (default)", True), ("capacity only", False)):
        for label, spells, extra in worlds:
            bt = settings(dataclasses.replace(base, degraded=spells), extra, latency)
            (result,), _ = run_policies(tr, bt, ["ours"])
            s = summarize(result, SLO)
            out.append((so_label, label, s))
            print(f"{so_label}, {label}: SLO {100 * s.slo_attainment:.1f}%, {s.gpu_hours:.2f} GPU-h", flush=True)
    return tr.name, out, time.process_time() - t0


def table(name: str, rows: list[tuple[str, str, Summary]], cpu_s: float, quick: bool, preset: str = PRESET) -> str:
    lines = [
        f"Trace {name}{' (first 20 minutes, --quick)' if quick else ''}, preset {preset}, typical cold starts, "
        f"policy `ours` (default ScaledObject), detailed mode. SLO: TTFT <= {SLO.ttft_s:g} s and mean ITL <= "
        f"{SLO.itl_s:g} s per request. The degraded replica: replica-0 at {SPEED:g}x speed from "
        f"{START / 60 * (1 / 3 if quick else 1):.0f} to {END / 60 * (1 / 3 if quick else 1):.0f} min.",
        "",
        "| ScaledObject | world | SLO attainment | p99 TTFT s | p99 ITL s | GPU-hours | scale events | dropped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for so_label, label, s in rows:
        lines.append(f"| {so_label} | {label} | {100 * s.slo_attainment:.1f}% | {s.ttft_p99_s:.2f} | "
                     f"{s.itl_p99_s:.3f} | {s.gpu_hours:.2f} | {s.scale_events} | {s.dropped} |")
    flag = "" if preset == PRESET else f" --preset {preset} --trace {name}"
    lines += ["", f"Generated by `scripts/degraded_backtest.py{' --quick' if quick else ''}{flag} --update-docs` "
              f"({cpu_s:.0f} CPU s for this trace)."]
    return "\n".join(lines)


def replace_block(path: Path, name: str, body: str) -> None:
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    text = path.read_text()
    a, b = text.index(start) + len(start), text.index(end)
    path.write_text(text[:a] + "\n" + body.strip() + "\n" + text[b:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", nargs="+", default=["azure2023-code", "azure2023-conv"],
                    help="shipped one-hour traces (default: azure2023-code azure2023-conv)")
    ap.add_argument("--quick", action="store_true", help="the first 20 minutes only")
    ap.add_argument("--preset", default=PRESET, help=f"model/hardware preset (default {PRESET}); another "
                    "preset's tables go to their own block, `degraded-<preset>` (made if missing)")
    ap.add_argument("--update-docs", action="store_true", help="write the table into docs/degraded.md")
    args = ap.parse_args()
    text = "\n\n".join(table(*run(name, args.quick, args.preset), args.quick, args.preset) for name in args.trace)
    print(text)
    if args.update_docs:
        block = "degraded" if args.preset == PRESET else "degraded-" + args.preset.replace("/", "-")
        if f"<!-- generated:{block} -->" not in DOC.read_text():
            with DOC.open("a") as f:
                f.write(f"\n<!-- generated:{block} -->\n<!-- /generated:{block} -->\n")
        replace_block(DOC, block, text)


if __name__ == "__main__":
    main()
