"""Parse cost of every bundled engine body: exporter.parse against prometheus_client, same run.

For each body: our parser with the engine adapter's `wanted` filter (what the exporter runs), our parser
with no filter, `prometheus_client.parser.text_string_to_metric_families` (fully consumed), and the
whole `exporter.engines.normalize` (detect + filtered parse + normalize). Each figure is the best of
`--rounds` rounds of process CPU time, each round `--inner` calls, divided by `--inner`.

    .venv/bin/python bench/bench_parse.py [--rounds 15] [--inner 20] [--out bench/results/parse.md]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from importlib.metadata import version
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.engines import ADAPTERS, detect, normalize
from keda_llm.exporter.model import Target
from keda_llm.exporter.parse import parse

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
GOAL_BODY = "vllm-0.32.0-cpu-load.prom"
GOAL_RATIO = 5.0


def best_cpu_seconds(fn: Callable[[], object], rounds: int, inner: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(inner):
            fn()
        best = min(best, time.process_time() - start)
    return best / inner


def reference(body: str) -> int:
    return sum(len(family.samples) for family in text_string_to_metric_families(body))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "parse.md")
    args = ap.parse_args()

    rows = []
    goal_ratio = 0.0
    for path in sorted(FIXTURES.glob("*.prom")):
        body = path.read_text()
        engine = detect(parse(body))
        assert engine is not None, path.name
        wanted = ADAPTERS[engine].wanted.__contains__
        target = Target(url="bench", model="m")
        kept, total = len(parse(body, wanted)), len(parse(body))
        assert total == reference(body), path.name  # same sample count as the reference, or the race is void
        filtered = best_cpu_seconds(partial(parse, body, wanted), args.rounds, args.inner)
        unfiltered = best_cpu_seconds(partial(parse, body), args.rounds, args.inner)
        ref = best_cpu_seconds(partial(reference, body), args.rounds, args.inner)
        norm = best_cpu_seconds(partial(normalize, body, target), args.rounds, args.inner)
        if path.name == GOAL_BODY:
            goal_ratio = ref / filtered
        rows.append(f"| `{path.name}` | {engine} | {len(body) / 1024:.1f} | {kept} / {total} | "
                    f"{filtered * 1e3:.3f} | {unfiltered * 1e3:.3f} | {ref * 1e3:.3f} | "
                    f"**{ref / filtered:.1f}x** | {ref / unfiltered:.1f}x | {norm * 1e3:.3f} |")
        print(rows[-1], flush=True)

    # a 1 MB label value (an engine that puts a prompt or a path in a label): the tolerant reader (a blank
    # before the braces sends the line there) against the canonical regex, same value, same run
    value = "x" * 1_000_000 + "\\n" + "y" * 10
    tolerant = best_cpu_seconds(partial(parse, f'm {{a="{value}"}} 1\n'), 3, 5)
    canonical = best_cpu_seconds(partial(parse, f'm{{a="{value}"}} 1\n'), 3, 5)
    huge = (f"A 1 MB label value: the tolerant reader {tolerant * 1e3:.1f} ms, the canonical one "
            f"{canonical * 1e3:.1f} ms ({tolerant / canonical:.1f}x).")
    print(huge, flush=True)

    met = "met" if goal_ratio >= GOAL_RATIO else "NOT met"
    text = "\n".join([
        "# Parsing engine bodies: exporter.parse vs prometheus_client",
        "",
        f"Best of {args.rounds} rounds x {args.inner} calls, process CPU time per call, all in one run "
        f"(`bench/bench_parse.py`). Python {platform.python_version()}, prometheus_client "
        f"{version('prometheus_client')}, {platform.machine()}.",
        "",
        "- *filtered*: `exporter.parse.parse(body, wanted)` with the detected engine's adapter filter "
        "(what the exporter runs); *all*: no filter.",
        "- *prometheus_client*: `text_string_to_metric_families(body)`, fully consumed.",
        "- *normalize*: `exporter.engines.normalize(body, target)`: detection, filtered parse and normalization.",
        "",
        "| body | engine | KiB | samples kept / all | filtered ms | all ms | prometheus_client ms | "
        "speed-up filtered | speed-up all | normalize ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Goal: at least {GOAL_RATIO:.0f}x on the real vLLM body (`{GOAL_BODY}`, filtered): "
        f"{goal_ratio:.1f}x, {met}.",
        "",
        huge,
        "",
    ])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0 if goal_ratio >= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
