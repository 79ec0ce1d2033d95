"""The long tier (scaler/longhistory.py): memory for 1,000 models x 14 days, CPU per observation against the
short tiers' append, CPU to read 14 days, a Prometheus rebuild per model, and the simulator with and without.

Run: .venv/bin/python bench/bench_history_long.py [--models 1000] [--skip-prometheus] [--skip-sim]
     [--out bench/results/history_long.md]

- memory: tracemalloc peak and RSS growth for `--models` LongTiers of 14 days, every minute written
  (goal: <= 150 MB);
- append: CPU per observation of the long tier's part of ModelHistory.ingest (long_values + LongTier.add)
  against the three short tiers' `_Tier.add` on the same rows, same run (process time, best of 3), at
  the scaler's 2 s collection and at a 30 s one (where encoding the closed minute weighs most);
- read: CPU of `minutes(name, now, 14 days)` (20,160 values), best of 3 x 200 reads;
- rebuild: a real Prometheus (the `prometheus` and `promtool` binaries) holding 14 days of 2 replicas'
  series per model at a 60 s scrape, written with `promtool tsdb create-blocks-from openmetrics`;
  wall time and this process's CPU per model for backfill.rebuild over 14 days (14 range queries);
- simulator: the azure2023-code hour (fluid mode, the scaler through KEDA+HPA) with the long tier and
  with its `add` replaced by a no-op, alternating, 3 rounds each, process CPU: the week simulation runs
  the same code per observation, so the hour's relative cost is the week's.
"""

from __future__ import annotations

import argparse
import gc
import math
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path

import numpy as np

from keda_llm.scaler import backfill
from keda_llm.scaler.history import _LONG_COLUMNS, FIELDS, TIERS, _Tier
from keda_llm.scaler.longhistory import MINUTE, LongTier, long_values
from keda_llm.scaler.sources.promql import PrometheusClient

DAYS = 14.0


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory(models: int) -> tuple[float, float]:
    """(tracemalloc bytes, RSS growth bytes) of `models` full 14-day tiers."""
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    n = round(DAYS * 1440)
    minutes = np.arange(n, dtype=np.int64)
    values = np.random.default_rng(1).uniform(0.1, 1000.0, (n, 4))
    tiers = []
    for _ in range(models):
        t = LongTier(DAYS)
        t.merge(minutes, values)  # every minute written: every page touched
        tiers.append(t)
    del minutes, values
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()  # what the tiers hold (arrays and objects)
    tracemalloc.stop()
    grown = rss_bytes() - rss0
    del tiers
    return float(current), float(grown)


def append_cpu(cadence_s: float, n: int = 60_000) -> tuple[float, float]:
    """(long tier us per observation, short tiers us per observation) with an observation every `cadence_s`
    (the minute is encoded once per 60 / cadence_s observations), best of 3."""
    rng = np.random.default_rng(2)
    rows = [np.where(rng.random(len(FIELDS)) < 0.1, math.nan, rng.uniform(0, 100, len(FIELDS))) for _ in range(256)]
    best_long = best_short = math.inf
    for _ in range(3):
        long = LongTier(DAYS)
        short = [_Tier(s, k, dt) for s, k, dt in TIERS]
        c0 = time.process_time()
        for i in range(n):
            row = rows[i & 255]
            long.add(i * cadence_s, long_values(row.tolist(), *_LONG_COLUMNS))
        best_long = min(best_long, (time.process_time() - c0) / n)
        c0 = time.process_time()
        for i in range(n):
            row = rows[i & 255]
            for tier in short:
                tier.add(i * cadence_s, row)
        best_short = min(best_short, (time.process_time() - c0) / n)
    return best_long * 1e6, best_short * 1e6


def read_cpu() -> float:
    """us per 14-day read of one series, best of 3 x 200."""
    t = LongTier(DAYS)
    n = t.n
    t.merge(np.arange(n, dtype=np.int64), np.random.default_rng(3).uniform(0.1, 1000.0, (n, 4)))
    now = n * MINUTE
    best = math.inf
    for _ in range(3):
        c0 = time.process_time()
        for _ in range(200):
            _, values = t.minutes("demand", now, DAYS * 86_400)
        best = min(best, (time.process_time() - c0) / 200)
    assert len(values) == n and not np.isnan(values).any()
    return best * 1e6


def rebuild_per_model(models: int = 3) -> tuple[float, float, int] | str:
    """(wall s per model, this process's CPU s per model, samples in Prometheus), or why it was skipped."""
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or promtool is None:
        return "skipped: no prometheus/promtool binary"
    end = math.floor(time.time() / 60) * 60 - 600
    m0 = int(end // 60) - round(DAYS * 1440)
    work = Path(tempfile.mkdtemp(prefix="bench-long-"))
    try:
        samples = 0
        with (work / "data.om").open("w") as f:
            for name in ("llm_engine_up", "llm_requests_running", "llm_requests_waiting",
                         "llm_requests_finished_total", "llm_prompt_tokens_total", "llm_generation_tokens_total"):
                for m in range(models):
                    for pod in ("a", "b"):
                        lab = f'model="m{m}",namespace="bench",pod="{pod}"'
                        total = 0.0
                        lines = []
                        for k in range(round(DAYS * 1440)):
                            t = (m0 + k) * 60 + 7
                            r = 1.0 + (k % 1440) / 720
                            total += r * 60
                            v = 1.0 if name == "llm_engine_up" else (total if name.endswith("_total") else r * 4)
                            lines.append(f"{name}{{{lab}}} {v} {t}")
                        samples += len(lines)
                        f.write("\n".join(lines) + "\n")
            f.write("# EOF\n")
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "data.om"),
                        str(work / "tsdb")], check=True, capture_output=True)
        (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
        with socket.socket() as probe:  # a free port
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen([prom, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--storage.tsdb.retention.time=30d", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(0.1)
            client = PrometheusClient(f"127.0.0.1:{port}", timeout_s=60)
            last = int(end // 60) - 1
            backfill.rebuild(client, "bench", "m0", last - 1439, last)  # warm Prometheus' caches a little
            w0, c0 = time.perf_counter(), time.process_time()
            for m in range(models):
                minutes, values = backfill.rebuild(client, "bench", f"m{m}", last - round(DAYS * 1440) + 1, last)
                assert np.count_nonzero(~np.isnan(values[:, 3])) > 0.99 * len(minutes) - 2, "rebuild found no data"
            return (time.perf_counter() - w0) / models, (time.process_time() - c0) / models, samples
        finally:
            proc.terminate()
            proc.wait(10)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def simulator(rounds: int = 3) -> tuple[list[float], list[float], int] | str:
    """(CPU s with the long tier per round, without, observations ingested per run)."""
    try:
        from keda_llm.simulator.control.policies import build_controller
        from keda_llm.simulator.hardware.presets import get_preset
        from keda_llm.simulator.run import Backtest, simulate
        from keda_llm.simulator.workload.traces import load_shipped
    except ImportError as err:
        return f"skipped: {err}"
    from keda_llm.scaler import history

    trace = load_shipped("azure2023-code")
    count = [0]
    real_add = LongTier.add

    def counting(self: LongTier, at: float, values: tuple[float, float, float, float]) -> None:
        count[0] += 1
        real_add(self, at, values)

    def noop(self: LongTier, at: float, values: tuple[float, float, float, float]) -> None:
        return None

    def run() -> float:
        bt = Backtest(get_preset("llama-3.1-8b/h100"), fluid_dt_s=0.25)
        ctl = build_controller("ours", model="m", max_replicas=64, concurrency_target=64, static_replicas=4)
        c0 = time.process_time()
        simulate(trace, bt, ctl, "fluid")
        return time.process_time() - c0

    with_long: list[float] = []
    without: list[float] = []
    try:
        LongTier.add = counting  # type: ignore[method-assign]
        run()  # warm-up (numba compiles the slice loop once), and the count
        n = count[0]
        for _ in range(rounds):
            LongTier.add = real_add  # type: ignore[method-assign]
            with_long.append(run())
            LongTier.add = noop  # type: ignore[method-assign]
            without.append(run())
    finally:
        LongTier.add = real_add  # type: ignore[method-assign]
    assert history.LongTier is LongTier
    return with_long, without, n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--skip-prometheus", action="store_true")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/results/history_long.md"))
    args = ap.parse_args()

    traced, grown = memory(args.models)
    long_us, short_us = append_cpu(2.0)
    long30_us, short30_us = append_cpu(30.0)
    read_us = read_cpu()
    rows = [
        (f"memory, {args.models} models x 14 days (tracemalloc)", f"{traced / 1e6:.1f} MB ({traced / 2**20:.1f} MiB)"),
        (f"memory, {args.models} models x 14 days (RSS growth)", f"{grown / 1e6:.1f} MB"),
        ("bytes per model-minute", f"{traced / args.models / (DAYS * 1440):.2f}"),
        ("append, one observation every 2 s: long tier, CPU per observation", f"{long_us:.2f} us"),
        ("append, every 2 s: the three short tiers (baseline, same rows)", f"{short_us:.2f} us"),
        ("ratio long / short tiers", f"{long_us / short_us:.2f}"),
        ("append, one observation every 30 s (a minute encoded every 2nd): long tier / short tiers",
         f"{long30_us:.2f} us / {short30_us:.2f} us ({long30_us / short30_us:.2f})"),
        ("read 14 days of one series (20,160 minutes), CPU", f"{read_us:.0f} us"),
    ]
    if not args.skip_prometheus:
        got = rebuild_per_model()
        if isinstance(got, str):
            rows.append(("Prometheus rebuild", got))
        else:
            wall, cpu, samples = got
            rows += [("Prometheus rebuild of 14 days per model (2 replicas, 60 s scrape; 14 range queries), wall",
                      f"{wall:.2f} s"), ("... of which this process's CPU", f"{cpu:.2f} s"),
                     ("samples in that Prometheus", f"{samples:,}")]
    if not args.skip_sim:
        sim = simulator()
        if isinstance(sim, str):
            rows.append(("simulator hour", sim))
        else:
            with_long, without, n = sim
            w, wo = min(with_long), min(without)
            rows += [("simulator: azure2023-code 1 h, fluid, CPU with the long tier (best of 3)",
                      f"{w:.2f} s ({', '.join(f'{x:.2f}' for x in with_long)})"),
                     ("... with LongTier.add a no-op (best of 3)",
                      f"{wo:.2f} s ({', '.join(f'{x:.2f}' for x in without)})"),
                     ("observations ingested in that hour", f"{n:,}"),
                     ("ratio with / without", f"{w / wo:.3f}"),
                     ("the long tier's share, from the append cost", f"{n * long_us * 1e-6:.3f} s = "
                      f"{100 * n * long_us * 1e-6 / wo:.1f}% of the hour")]
    text = ("# Long history: memory and CPU\n\n"
            f"`bench/bench_history_long.py --models {args.models}`, Python {sys.version.split()[0]}, "
            f"{time.strftime('%Y-%m-%d')}. CPU time is process time.\n\n"
            "| measure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
