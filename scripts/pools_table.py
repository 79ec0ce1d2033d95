"""Backtests of the pools (simulator/pools.py): P/D modes vs one unified pool, and a GPU-variant mix vs one variant.

    .venv/bin/python scripts/pools_table.py [--update-docs] [--quick]

P/D: llama-3.1-70b/h100-tp4 on the shipped Azure 2023 hours (conversation, code) at 6x their rate, and a
workload shift built from them (the conversation hour's first half, then the code hour's second half),
under: one unified pool (the scaler's `tokens` policy, defaults), the three ratio modes of the split
(fixed 1:2, independent, bounded 1:4..1:1), and Dynamo's planner in its P/D mode. Variants: llama-3.1-8b
on A100 (at most 3 schedulable: the rest stay Pending) and H100, the conversation hour at 4x, under the
split's cheapest mix and each variant alone. Prices are inputs of the backtest, not market quotes.
--update-docs writes both tables into the marked blocks of docs/pools.md; --quick runs 15 minutes of each.
A full run takes about 30 s of CPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from keda_llm.simulator.control.anchors.dynamo import prefill_tokens_per_s
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.pools import PdSetup, PdSimulation, VariantSpec, VariantsSimulation, shifted_trace
from keda_llm.simulator.workload.traces import Trace, load_shipped

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "pools.md"
PD_MODES = ("unified", "fixed", "independent", "bounded", "dynamo-pd")
STANDING = (4, 6, 8, 10, 12, 15, 20, 30)  # prefill replicas held all hour, for the burst-headroom table
PD_RATE, VARIANT_RATE = 6.0, 4.0
PRICES = {"a100": 1.8, "h100": 4.1}  # per replica-hour: inputs of the backtest
A100_SCHEDULABLE = 3
A100_DEAR = 2.4  # an A100 price at which it costs more per unit of SLO-meeting capacity than the H100
A100 = get_preset("llama-3.1-8b/a100")


def traces(duration: float) -> list[Trace]:
    conv, code = load_shipped("azure2023-conv"), load_shipped("azure2023-code")
    out = [conv.scale_rate(PD_RATE), code.scale_rate(PD_RATE), shifted_trace(conv, code).scale_rate(PD_RATE)]
    return [t.window(0.0, duration) for t in out]


def pd_table(duration: float) -> str:
    """Every mode told the ITL target and the cold start; the unified pool also as shipped (TTFT target only)."""
    setup = PdSetup(get_preset("llama-3.1-70b/h100-tp4"))
    shipped = PdSetup(get_preset("llama-3.1-70b/h100-tp4"), slo_keys=False)
    rows = ["| trace | controller | GPU-hours | mean prefill / decode replicas | TTFT p50 / p99 (s) | "
            "ITL mean / p99 (ms) | SLO met |", "|---|---|---|---|---|---|---|"]
    for tr in traces(duration):
        for mode, s in [("unified", shipped), *((m, setup) for m in PD_MODES)]:
            r = PdSimulation(tr, s, mode).run()
            name = f"{mode} (TTFT target only)" if s is shipped else mode
            pools = (f"{r.mean_decode:.1f} (one pool)" if mode == "unified"
                     else f"{r.mean_prefill:.1f} / {r.mean_decode:.1f}")
            rows.append(f"| {tr.name} | {name} | {r.gpu_hours:.1f} | {pools} | {r.ttft_p50:.2f} / {r.ttft_p99:.1f} | "
                        f"{r.itl_mean * 1000:.0f} / {r.itl_p99 * 1000:.0f} | {r.slo_attainment:.1%} |")
    return "\n".join(rows) + "\n"


def standing_table(duration: float) -> str:
    """What a prefill pool held at N replicas all hour gives: the share of prompts whose prefill (FIFO over
    the pool's summed rate, as simulator/pools.py computes it) ends within 1.9 s of arrival."""
    perf = get_preset("llama-3.1-70b/h100-tp4").perf()
    rows = ["| trace | " + " | ".join(f"{n} replicas" for n in STANDING) + " |",
            "|---|" + "---|" * len(STANDING)]
    for tr in traces(duration)[:2]:
        tps = prefill_tokens_per_s(perf, float(tr.prompt_tokens.mean()))
        arrival, prompt = tr.arrival_s.tolist(), tr.prompt_tokens.astype(float).tolist()
        cells = []
        for n in STANDING:
            free, ok = 0.0, 0
            for a, p in zip(arrival, prompt, strict=True):
                free = max(a, free) + p / (n * tps)
                ok += free - a <= 1.9
            cells.append(f"{ok / max(1, len(arrival)):.1%}")
        rows.append(f"| {tr.name} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def variants_table(duration: float) -> str:
    tr = load_shipped("azure2023-conv").scale_rate(VARIANT_RATE).window(0.0, duration)
    rows = ["| A100 price | A100 limit | controller | cost | GPU-hours | mean replicas | Pending pod-minutes | "
            "TTFT p99 (s) | ITL mean (ms) | SLO met | finished |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    h100 = VariantSpec("h100", get_preset("llama-3.1-8b/h100"), PRICES["h100"])
    for price in (PRICES["a100"], A100_DEAR):
        runs: list[tuple[str, str, VariantSpec]] = [
            ("none", "mix", VariantSpec("a100", A100, price)),
            (f"maxReplicas={A100_SCHEDULABLE}", "mix", VariantSpec("a100", A100, price, None, A100_SCHEDULABLE)),
            (f"{A100_SCHEDULABLE} schedulable", "mix", VariantSpec("a100", A100, price, A100_SCHEDULABLE)),
            ("none", "a100", VariantSpec("a100", A100, price)),
            ("none", "h100", VariantSpec("a100", A100, price))]
        if price == PRICES["a100"]:
            stuck = VariantSpec("a100", A100, price, A100_SCHEDULABLE)
            runs += [(f"{A100_SCHEDULABLE} schedulable", "tokens:a100", stuck),
                     ("none", "tokens:h100", VariantSpec("a100", A100, price))]
        for limit, c, a100 in runs:
            r = VariantsSimulation(tr, [a100, h100], c).run()
            mean = ", ".join(f"{k} {v:.1f}" for k, v in r.mean_replicas.items())
            rows.append(f"| {price:g} | {limit} | {c} | {r.cost:.2f} | {r.gpu_hours:.1f} | {mean} | "
                        f"{r.pending_s / 60:.0f} | {r.ttft_p99:.1f} | {r.itl_mean * 1000:.0f} | "
                        f"{r.slo_attainment:.1%} | {r.finished}/{r.arrived} |")
    return "\n".join(rows) + "\n"


def write_block(path: Path, name: str, body: str) -> None:
    text = path.read_text()
    pattern = re.compile(rf"(<!-- generated:{name} -->\n)(.*?)(<!-- /generated:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no <!-- generated:{name} --> block")
    path.write_text(pattern.sub(lambda m: m.group(1) + body + m.group(3), text))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--update-docs", action="store_true", help="write the tables into docs/pools.md")
    ap.add_argument("--quick", action="store_true", help="15 minutes of each trace (checks the script)")
    args = ap.parse_args(argv)
    duration = 900.0 if args.quick else 3600.0
    t0 = time.process_time()
    pd, standing, var = pd_table(duration), standing_table(duration), variants_table(duration)
    cpu = time.process_time() - t0
    sys.stdout.write(pd + "\n" + standing + "\n" + var + f"\n({cpu:.0f} s CPU)\n")
    if args.update_docs:
        write_block(DOC, "pools-pd", pd)
        write_block(DOC, "pools-standing", standing)
        write_block(DOC, "pools-variants", var)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
