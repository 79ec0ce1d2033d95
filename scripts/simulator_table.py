"""The docs table: every baseline and our reactive policy on each shipped trace, typical cold starts.

    .venv/bin/python scripts/simulator_table.py [--update-docs] [--out FILE] [--quick]

For each trace it runs ours (the scaler's tokens policy through KEDA+HPA, keda-llm's recommended
ScaledObject), static provisioning at the oracle's peak, the queue (num_requests_waiting > 5), GPU
utilization and concurrency baselines, and the oracle, and prints SLO attainment, GPU-hours / oracle and
GPU-hours / the lower bound (simulator.oracle.lower_bound) as Markdown (plus the full table per trace and the
oracle's status: target met, or why not). Not run by CI: it takes minutes. The Azure 2024 week is
cut to a 6-hour window (the oracle simulates its schedule several times); --quick cuts every trace to
its first 20 minutes, to check the script itself. --update-docs writes the tables into the marked blocks
of docs/simulator-results.md (everything) and docs/simulator.md (the summary); --check compares them
with a fresh run instead (a refactoring must leave them identical but for the CPU seconds).
--oracle-check runs only the oracle and the bound on every trace (full length unless --quick) and exits 1
unless each oracle meets its target or says why not, and each bound is at or below its oracle's GPU-hours:
the opt-in slow counterpart of tests/simulator/test_sim_oracle_traces.py.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass
from pathlib import Path

from keda_llm.simulator.oracle import OraclePlan
from keda_llm.simulator.presets import get_preset
from keda_llm.simulator.report import Slo, Summary, markdown_table, summarize, with_oracle_ratio
from keda_llm.simulator.run import Backtest, run_policies
from keda_llm.simulator.traces import Trace, load_shipped

DOCS = Path(__file__).resolve().parent.parent / "docs"
PRESET = "llama-3.1-70b/h100-tp4"
SLO = Slo(ttft_s=2.0, itl_s=0.1)
POLICIES = ["ours", "static", "queue", "gpu", "concurrency", "oracle"]


@dataclass(frozen=True)
class Case:
    trace: str
    window: tuple[float, float] | None = None
    note: str = ""


CASES = [
    Case("azure2023-code"),
    Case("azure2023-conv"),
    Case("mooncake-conv"),
    Case("azure2024-code", (600 * 60.0, 960 * 60.0), "minutes 600-960 of the week"),
    Case("burstgpt-week1"),
]


def load(case: Case, quick: bool) -> Trace:
    tr = load_shipped(case.trace)
    if case.window is not None:
        tr = tr.window(*case.window)
    if quick:
        tr = tr.window(0.0, 1200.0)
    return tr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="also write the Markdown here")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--update-docs", action="store_true", help="write the tables into docs/ (marked blocks)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the docs' tables differ from a fresh run (the CPU-seconds figures aside)")
    ap.add_argument("--oracle-check", action="store_true",
                    help="run only the oracle and the lower bound; exit 1 unless each meets its target or says why "
                         "and each bound is at or below the oracle's GPU-hours")
    args = ap.parse_args()
    bt = Backtest(get_preset(PRESET), cold_start="typical", slo=SLO)
    if args.oracle_check:
        raise SystemExit(oracle_check(bt, args.quick))
    head = (["trace", "requests"] + [f"{p} SLO / GPU-h÷oracle / ÷bound" for p in POLICIES]
            + ["oracle GPU-h", "bound GPU-h", "oracle target"])
    summary_rows: list[str] = []
    details: list[str] = []
    for case in CASES:
        tr = load(case, args.quick)
        t0 = time.process_time()
        results, oracle = run_policies(tr, bt, POLICIES)
        assert oracle is not None and oracle.bound is not None
        sums: list[Summary] = with_oracle_ratio([summarize(r, SLO) for r in results], oracle.bound.gpu_hours)
        cpu = time.process_time() - t0
        by = {s.policy: s for s in sums}
        cells = [f"{100 * by[p].slo_attainment:.1f}% / {by[p].gpu_hours_vs_oracle or 0:.2f}x / "
                 f"{by[p].gpu_hours_vs_bound or 0:.2f}x" for p in POLICIES]
        cells += [f"{by['oracle'].gpu_hours:.2f}", f"{oracle.bound.gpu_hours:.2f}", short_status(oracle)]
        name = tr.name + (f" ({case.note})" if case.note else "")
        summary_rows.append(f"| {name} | {len(tr)} | " + " | ".join(cells) + " |")
        note = f"Oracle: {oracle.status()} {bound_line(oracle)} "
        details.append(f"### {name}\n\n{markdown_table(sums)}\n\n{note}Mode {bt.resolved_mode(tr)}, "
                       f"{cpu:.0f} CPU s.\n")
        print(summary_rows[-1], flush=True)
    text = "\n".join([
        f"Preset {PRESET} (4 x H100 per replica), typical cold starts, SLO: TTFT <= {SLO.ttft_s:g} s and mean "
        f"ITL <= {SLO.itl_s:g} s per request. Each cell: SLO attainment / GPU-hours relative to the oracle / "
        f"relative to the lower bound (GPU-hours no schedule can go below).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *summary_rows,
        "",
        *details,
    ])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    summary = "\n".join(text.split("\n")[:4 + len(summary_rows)])
    if args.check:
        blocks = ((DOCS / "simulator-results.md", "simulator-table", text),
                  (DOCS / "simulator.md", "simulator-summary", summary))
        stale = [f"{path.name}:{name}" for path, name, body in blocks
                 if _without_cpu(read_block(path, name)) != _without_cpu(body.strip("\n"))]
        print("docs tables: " + ("differ in " + ", ".join(stale) if stale else "identical to this run"))
        raise SystemExit(1 if stale else 0)
    if args.update_docs:
        replace_block(DOCS / "simulator-results.md", "simulator-table", text)
        replace_block(DOCS / "simulator.md", "simulator-summary", summary)


def short_status(oracle: OraclePlan) -> str:
    """The summary table's cell: met, met on the lowered target, or not met."""
    if not oracle.met_target:
        return "NOT met"
    return "met" if oracle.feasible_share >= oracle.target else f"met ({100 * oracle.target_over_all:.1f}% of all)"


def bound_line(oracle: OraclePlan) -> str:
    b = oracle.bound
    assert b is not None
    return (f"Lower bound: {b.gpu_hours:.2f} GPU-h ({b.counted} requests at the peak {1e6 * b.seconds_per_token:.1f} "
            f"us/token, KV floor {b.kv_floor_replica_s / 3600:.2f} replica-h).")


def oracle_check(bt: Backtest, quick: bool) -> int:
    """Every trace: the oracle meets its target or says why; the bound is at or below its GPU-hours."""
    bad = 0
    for case in CASES:
        tr = load(case, quick)
        t0 = time.process_time()
        results, oracle = run_policies(tr, bt, ["oracle"])
        assert oracle is not None and oracle.bound is not None
        gpu_h = summarize(results[0], SLO).gpu_hours
        ok = (oracle.met_target or bool(oracle.reason)) and oracle.bound.gpu_hours <= gpu_h + 1e-9
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {tr.name}: oracle {gpu_h:.2f} GPU-h, bound {oracle.bound.gpu_hours:.2f} "
              f"GPU-h; {oracle.status()} {time.process_time() - t0:.0f} CPU s.", flush=True)
    return 1 if bad else 0


def _without_cpu(text: str) -> str:
    """The table with its one measured figure (CPU seconds per trace, never the same twice) blanked."""
    return re.sub(r"\d+ CPU s\.", "N CPU s.", text)


def read_block(path: Path, name: str) -> str:
    """What lies between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` in `path`."""
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    doc = path.read_text()
    return doc[doc.index(start) + len(start):doc.index(end)].strip("\n")


def replace_block(path: Path, name: str, body: str) -> None:
    """Replace what lies between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` in `path`."""
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    doc = path.read_text()
    a, b = doc.index(start) + len(start), doc.index(end)
    path.write_text(doc[:a] + "\n" + body.strip("\n") + "\n" + doc[b:])


if __name__ == "__main__":
    main()
