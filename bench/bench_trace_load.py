"""Reading a user's request CSV: the chunked numpy reader against the row-by-row reading, same run; and a
JSON-lines file: load_jsonl against its reader before dotted paths (each key checked, then read again).

A user's own trace can be tens of millions of rows (the Azure 2024 code week is 16.8 M). The baseline is the
same `load_csv` with numpy's conversion switched off, so every value goes through `_time` / `_token` (what
the reader did before chunks). Each case runs in its own process, so peak RSS is its own; CPU is the process
time of the load alone. Two layouts: the Azure trace's (date-time stamps) and plain numbers (Unix seconds).

    .venv/bin/python bench/bench_trace_load.py [--rows 1000000] [--repeat 3] [--out bench/results/trace_load.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import csv, json, resource, sys, time
from pathlib import Path
from keda_llm.simulator.workload import traces
path, cols, unit, how = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]


def before(p, time_col, prompt_col, output_col, unit):
    # the reader before chunks (to 2026-11-30): every value through _time / _token into lists of Python objects
    p = Path(p)
    with traces._open(p) as fh:
        reader = csv.reader(r for r in fh if not r.startswith("#"))
        header = [h.strip() for h in next(reader)]
        ti, pi, oi = (header.index(c) for c in (time_col, prompt_col, output_col))
        lines, times, prompts, outputs = [], [], [], []
        for k, row in enumerate(reader):
            line = 2 + k
            if not row:
                continue
            lines.append(line)
            times.append(traces._time(p, line, time_col, row[ti], unit))
            prompts.append(traces._token(p, line, prompt_col, row[pi]))
            outputs.append(traces._token(p, line, output_col, row[oi]))
    return traces._finish(p.name, p, time_col, lines, times, prompts, outputs, None, False)


def before_jsonl(p, time_key, prompt_key, output_key, unit):
    # load_jsonl to 2026-12-03: each key checked with `in`, then read again by name
    p = Path(p)
    lines, times, prompts, outputs = [], [], [], []
    with traces._open(p) as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            obj = json.loads(text)
            for key in (time_key, prompt_key, output_key):
                if key not in obj:
                    raise traces.TraceError(f"{p}: line {line}: missing field {key!r}")
            lines.append(line)
            times.append(traces._time(p, line, time_key, obj[time_key], unit))
            prompts.append(traces._token(p, line, prompt_key, obj[prompt_key]))
            outputs.append(traces._token(p, line, output_key, obj[output_key]))
    return traces._finish(p.name, p, time_key, lines, times, prompts, outputs, None, False)


if path.endswith(".jsonl"):
    load = before_jsonl if how == "before" else traces.load_jsonl
elif how == "rows":
    traces._fast_times = lambda raw, unit: None
    traces._fast_tokens = lambda raw: None
if not path.endswith(".jsonl"):
    load = before if how == "before" else traces.load_csv
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
tr = load(path, *cols, unit)
cpu = time.process_time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": len(tr), "cpu_s": cpu, "grown_mb": (peak - base) / 1024}))
"""


def write(directory: Path, rows: int) -> dict[str, tuple[Path, str, str]]:
    rng = random.Random(7)
    azure, plain, lines = directory / "azure.csv", directory / "plain.csv", directory / "answers.jsonl"
    with azure.open("w") as a, plain.open("w") as p, lines.open("w") as j:
        a.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        p.write("timestamp,prompt_tokens,output_tokens\n")
        us = 1_715_299_200_000_000
        for _ in range(rows):
            us += rng.randrange(0, 72_000)
            sec, frac = divmod(us, 1_000_000)
            prompt, output = rng.randrange(10, 8000), rng.randrange(1, 600)
            a.write(f"{_stamp(sec)}.{frac:06d}0,{prompt},{output}\n")
            p.write(f"{us / 1e6:.6f},{prompt},{output}\n")
            j.write(json.dumps({"created": us // 1_000_000, "model": "m", "timestamp": us / 1e6,
                                "prompt_tokens": prompt, "output_tokens": output}) + "\n")
    return {"Azure layout (date-times)": (azure, "TIMESTAMP,ContextTokens,GeneratedTokens", "datetime"),
            "plain (Unix seconds)": (plain, "timestamp,prompt_tokens,output_tokens", "s"),
            "JSON lines (flat keys)": (lines, "timestamp,prompt_tokens,output_tokens", "s")}


def _stamp(sec: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))


def run(path: Path, cols: str, unit: str, how: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), cols, unit, how],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case, interleaved; the least CPU counts")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = [f"# Reading a request file: CSV chunked vs row by row, JSON lines now vs before ({args.rows:,} rows)", "",
             f"{platform.python_version()}, {platform.machine()}; each case in its own process. before: every value "
             "through `_time`/`_token` into Python lists (the reader to 2026-11-30); row by row: the chunked reader "
             "with numpy's conversion off; now: the chunked reader. JSON lines: before, load_jsonl to 2026-12-03 "
             "(each key checked, then read again); now, load_jsonl with dotted paths. Each case run --repeat times, "
             "interleaved: the least CPU and the largest RSS growth count. Ratios are now / before.", "",
             "| layout | before: CPU s / RSS growth MB | row by row | now | CPU ratio | memory ratio |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as d:
        for label, (path, cols, unit) in write(Path(d), args.rows).items():
            jsonl = path.suffix == ".jsonl"  # one reader, row by row: no numpy path to switch off
            runs: dict[str, list[dict[str, float]]] = {"before": [], "now": []} if jsonl else \
                {"before": [], "rows": [], "now": []}
            for _ in range(args.repeat):  # interleaved, the least CPU of each: the machine's noise is one-sided
                for how, got in runs.items():
                    got.append(run(path, cols, unit, how))
            least = {how: {"rows": g[0]["rows"], "cpu_s": min(r["cpu_s"] for r in g),
                           "grown_mb": max(r["grown_mb"] for r in g)} for how, g in runs.items()}
            old, now = least["before"], least["now"]
            assert all(r["rows"] == args.rows for r in least.values())
            cells = [f"{r['cpu_s']:.2f} / {r['grown_mb']:.0f}" if r else "-"
                     for r in (old, least.get("rows"), now)]
            lines.append(f"| {label} | {' | '.join(cells)} | {now['cpu_s'] / old['cpu_s']:.2f}x | "
                         f"{now['grown_mb'] / max(old['grown_mb'], 1):.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
