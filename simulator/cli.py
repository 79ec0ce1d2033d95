"""`keda-llm simulate`: backtest a ScaledObject (and the baselines) on a request trace.

    keda-llm simulate --trace azure-conv-2023 --preset llama-3.1-8b/h100 --scaledobject my-so.yaml --out results/

prints a table per policy (SLO attainment, latency percentiles, GPU-hours and their ratio to the oracle,
scale events, cold starts, time at zero) and, with --out, writes results.json, config.json (the resolved
configuration) and replicas.png (demand and replicas over time per policy).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np

from keda_llm.common.durations import parse_duration
from keda_llm.simulator.cluster.engine import GAUGE_TIMINGS
from keda_llm.simulator.cluster.lead_in import LEAD_IN_S
from keda_llm.simulator.cluster.router import ROUTING_RULES
from keda_llm.simulator.control import ScaledObjectError, load_scaledobject
from keda_llm.simulator.hardware.preset_file import PresetFileError, resolve_preset
from keda_llm.simulator.hardware.presets import PRESETS, ConfigError, Preset
from keda_llm.simulator.workload.traces import (
    MINUTE_COLUMNS,
    SHIPPED,
    TimeUnit,
    Trace,
    TraceError,
    ambiguous,
    detect_layout,
    file_fields,
    is_minutes_csv,
    load_csv,
    load_jsonl,
    load_minutes_csv,
    load_shipped,
    match_fields,
)

#: friendlier names for the shipped traces
ALIASES = {
    "azure-code-2023": "azure2023-code",
    "azure-conv-2023": "azure2023-conv",
    "azure-2024-week": "azure2024-code",
    "azure-code-2024": "azure2024-code",
    "azure-conv-2024": "azure2024-conv",
    "mooncake": "mooncake-conv",
    "burstgpt": "burstgpt-week1",
}
TRACE_NAMES = tuple(sorted(set(SHIPPED) | set(ALIASES)))
#: the shipped traces as --help lists them: each name, then its other names
SHIPPED_HELP = "; ".join(
    name + "".join(f" = {a}" for a in sorted(a for a, n in ALIASES.items() if n == name)) for name in SHIPPED)
#: more replicas than a Kubernetes cluster runs pods for one Deployment (`simulate` and `tune` refuse more)
MOST_REPLICAS = 10_000
#: the SLOs a ScaledObject can carry (`simulate` and `tune`): the written targets are fractions of them, as
#: durations of 0.1 ms to 1 h (past them the oracle's lower bound sized its tables by the SLO: 507 GiB at 1e9 s)
SLO_TTFT_S = (0.01, 3600.0)
SLO_ITL_S = (0.001, 60.0)
#: the longest a trace may last, as loaded (after --window) and as shaped (--stretch): the per-minute histories'
#: own bound (traces.MAX_HISTORY_DAYS); a week stretched 1e8 times asked the oracle for 313 GiB, and a file of
#: epoch seconds with one row stamped 0 (56 years) ran with no end
MOST_SPAN_S = 400 * 86400.0
#: the fluid mode's longest slice (--fluid-dt): the presets' own are 0.06-0.25 s; 1e12 s never finished
MOST_FLUID_DT_S = 10.0
#: reading flags that only a CSV/JSONL file takes: given with a shipped trace or a Prometheus history, refused
FILE_ONLY_FLAGS = (("--time-column", "time_column"), ("--prompt-column", "prompt_column"),
                   ("--output-column", "output_column"), ("--time-unit", "time_unit"),
                   ("--hash-column", "hash_column"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    from keda_llm.simulator.control.policies import DEFAULT_POLICIES, POLICIES
    from keda_llm.simulator.run import MODES

    add_trace_arguments(p)

    c = p.add_argument_group("cluster and policies")
    c.add_argument("--preset", default="llama-3.1-8b/h100", metavar="NAME|FILE",
                   help=f"model on GPU type: {', '.join(sorted(PRESETS))}, or a preset file (YAML: your model's "
                        "config.json on your GPU, docs/simulator.md) [llama-3.1-8b/h100]")
    c.add_argument("--scaledobject", default=None, metavar="FILE",
                   help="a ScaledObject YAML (external or external-push trigger) for policy `ours`; without "
                        "it, ours runs keda-llm's recommended one for the preset (tokens policy, latency targets "
                        "at half the SLO; config.json's scaledobject is then null)")
    c.add_argument("--scaledobject-name", default=None, help="pick this ScaledObject when the file holds several")
    c.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                   help=f"comma-separated, from {', '.join(POLICIES)} [{','.join(DEFAULT_POLICIES)}]")
    c.add_argument("--cold-start", default="typical", choices=("typical", "fast"), help="cold start case [typical]")
    c.add_argument("--max-replicas", type=int, default=None,
                   help="upper bound for baselines and the oracle [the ScaledObject's maxReplicaCount, else 64]")
    c.add_argument("--routing", default="least_outstanding", choices=ROUTING_RULES,
                   help="how the gateway picks a replica: the activator's rule by outstanding requests, or with "
                        "the exporters' KV usage and waiting (least_loaded, detailed mode), or round robin "
                        "[least_outstanding]")
    c.add_argument("--max-wait", type=float, default=600.0,
                   help="seconds a request may wait at the gateway for a ready replica before it is dropped [600]")
    c.add_argument("--max-held", type=int, default=None,
                   help="the gateway's bound on held requests (the activator's max_held): past it a request is "
                        "refused 429 with Retry-After [unbounded]")

    s = p.add_argument_group("SLO and run")
    s.add_argument("--slo-ttft", type=slo_seconds, default=2.0,
                   help="time-to-first-token target: seconds, or a duration (2s, 1500ms) [2]")
    s.add_argument("--slo-itl", type=slo_seconds, default=0.1,
                   help="mean inter-token latency target: seconds, or a duration (100ms) [0.1]")
    s.add_argument("--mode", default="auto", choices=MODES,
                   help="detailed (per request and iteration), fluid (cohorts, for long traces) or auto [auto]")
    s.add_argument("--fluid-dt", type=float, default=None,
                   help="fluid mode time slice, seconds: 0.5 is about twice as fast and coarser [the preset's: "
                        "0.25, shorter where a full prefill iteration is short, e.g. 0.1 on 8B H100]")
    s.add_argument("--gauges", default="leading", choices=GAUGE_TIMINGS,
                   help="when the engines' gauges change: leading (the engine's state as the simulator applies "
                        "it, a step ahead) or published (as vLLM publishes them, at each iteration's end) [leading]")
    s.add_argument("--seed", type=int, default=0, help="seed for cold starts and synthesized arrivals [0]")
    s.add_argument("--out", default=None, metavar="DIR", help="write results.json, config.json and replicas.png here")
    s.add_argument("--quiet", action="store_true", help="no progress bar")


def slo_seconds(text: str) -> float:
    """An SLO flag's value (`simulate` and `tune`): a number of seconds as before (`2`, `0.1`; nan, inf and 0
    pass, for the range check to name the flag), or a Go duration (`2s`, `100ms`), common/durations.py's."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None


def add_trace_arguments(p: argparse.ArgumentParser, required: bool = True) -> None:
    """The trace flags `load_trace` reads (shared by `simulate` and `tune`)."""
    t = p.add_argument_group("trace")
    t.add_argument("--trace", required=required, metavar="NAME|PATH",
                   help=f"a shipped trace ({SHIPPED_HELP}) or a CSV/JSONL file (.gz read transparently)")
    t.add_argument("--format", default="auto", choices=("auto", "csv", "jsonl", "minutes"),
                   help="a file's format: one request per row (csv, jsonl) or a per-minute history (minutes: "
                        f"{', '.join(MINUTE_COLUMNS)}); auto: by its suffix and header [auto]")
    # None: not given (a public trace's own columns may then be read, LAYOUTS); READING_DEFAULTS fill the rest
    t.add_argument("--time-column", default=None, help="CSV/JSONL: arrival time column [timestamp]")
    t.add_argument("--prompt-column", default=None, help="CSV/JSONL: prompt tokens column [prompt_tokens]")
    t.add_argument("--output-column", default=None, help="CSV/JSONL: output tokens column [output_tokens]")
    t.add_argument("--time-unit", default=None, choices=("s", "ms", "us", "ns", "datetime"),
                   help="CSV/JSONL: unit of the time column [s]")
    t.add_argument("--hash-column", default=None, help="JSONL: prefix block hashes column (list of ints), optional")
    t.add_argument("--sort", action="store_true", help="CSV/JSONL: sort rows by time instead of refusing unsorted")
    t.add_argument("--window", default=None, metavar="START:END",
                   help="only requests arriving in [START, END) seconds, re-based to 0")
    t.add_argument("--stretch", type=float, default=1.0, help="multiply time by this (2 = half the rate) [1]")
    t.add_argument("--rate-scale", type=float, default=1.0, help="multiply the request rate by this [1]")
    t.add_argument("--lead-in", type=float, default=LEAD_IN_S, metavar="SECONDS",
                   help="the trace (after --window, --stretch, --rate-scale) is taken as one period of traffic that "
                        "repeats: its last SECONDS play first, unscored, so no policy starts cold where the oracle "
                        f"starts warm (as docs/simulator-results.md's tables); 0: start cold [{LEAD_IN_S:g}]")


def file_flags_given(args: argparse.Namespace) -> list[str]:
    """The flags given that only a CSV/JSONL file reads (`FILE_ONLY_FLAGS`, `--format`, `--sort`)."""
    given = [flag for flag, key in FILE_ONLY_FLAGS if getattr(args, key, None) is not None]
    given += ["--format"] if getattr(args, "format", "auto") != "auto" else []
    return given + (["--sort"] if getattr(args, "sort", False) else [])


def load_trace(args: argparse.Namespace) -> Trace:
    """The trace named or pointed to by --trace, with window, stretch and rate scale applied."""
    name = ALIASES.get(args.trace, args.trace)
    path = Path(args.trace)
    if name in SHIPPED:
        given = file_flags_given(args)
        if given:  # ignored, they were: the user meant something by them
            raise TraceError(f"{', '.join(given)}: {'applies' if len(given) == 1 else 'apply'} to a CSV/JSONL "
                             f"file, not to the shipped trace {args.trace!r}")
        tr = load_shipped(name, seed=args.seed)
    elif args.trace and path.exists():  # "" is no file (Path("") is the current folder)
        suffixes = "".join(path.suffixes[-2:]).lower()
        fmt = getattr(args, "format", "auto")
        if fmt == "auto":  # .json, .jsonl, .ndjson (and .gz of each) are JSON lines
            fmt = "jsonl" if "json" in suffixes else ("minutes" if is_minutes_csv(path) else "csv")
        if fmt == "minutes":
            if getattr(args, "sort", False):
                raise TraceError(f"{path}: --sort sorts request rows; a per-minute history's minutes must rise")
            tr = load_minutes_csv(path, seed=args.seed)
        else:
            time_col, prompt_col, output_col, unit, hashes = _columns(args, path, jsonl=fmt == "jsonl")
            if fmt == "jsonl":
                tr = load_jsonl(path, time_col, prompt_col, output_col, unit, hash_key=hashes, sort=args.sort)
            else:
                if hashes:
                    raise TraceError(f"{path}: --hash-column reads a JSONL field (a list of block hashes); a CSV "
                                     "has none")
                tr = load_csv(path, time_col, prompt_col, output_col, unit, sort=args.sort)
    else:
        raise TraceError(f"unknown trace {args.trace!r}: not a shipped trace ({', '.join(TRACE_NAMES)}) "
                         "and no such file")
    return shape_trace(tr, args)


#: What the reading flags stand for when not given. While no column flag is given, a file in a public trace's
#: own layout is read by its column names (LAYOUTS).
READING_DEFAULTS: dict[str, str | None] = {"time_column": "timestamp", "prompt_column": "prompt_tokens",
                                           "output_column": "output_tokens", "time_unit": "s", "hash_column": None}


_COLUMN_FLAGS = ("time_column", "prompt_column", "output_column")


def _spelled(path: Path, fields: list[str], name: str, i: int) -> str:
    """`name` as the file spells it (case aside); TraceError where two of its columns match it apart from case."""
    two = ambiguous(fields, name)
    if two:
        flag = "--" + _COLUMN_FLAGS[i].replace("_", "-")
        raise TraceError(f"{path}: columns {', '.join(repr(f) for f in two)} all match {name!r} apart from case: "
                         f"{flag} names the one to read")
    got = match_fields(fields, (name,))
    return got[0] if got else name


def _columns(args: argparse.Namespace, path: Path, jsonl: bool) -> tuple[str, str, str, TimeUnit, str | None]:
    """(time, prompt, output column, time unit, hash column) for a request file: the flags given, the others'
    defaults; or, where no column flag is given and the file lacks the default names, a public trace's layout
    (said on stderr), its unit and hash column unless --time-unit or --hash-column is given."""
    flags = {k: getattr(args, k, None) for k in READING_DEFAULTS}
    chosen = {k: v if v is not None else READING_DEFAULTS[k] for k, v in flags.items()}
    given = (str(chosen["time_column"]), str(chosen["prompt_column"]), str(chosen["output_column"]),
             cast(TimeUnit, chosen["time_unit"]), chosen["hash_column"])
    fields = file_fields(path, jsonl)
    named = [flags[k] is not None for k in _COLUMN_FLAGS]
    if any(named):  # the user named columns: those as named, the others' default names case aside
        names = given[:3]
        cols = [names[i] if named[i] else _spelled(path, fields, names[i], i) for i in range(3)]
        return cols[0], cols[1], cols[2], given[3], given[4]
    spelled = match_fields(fields, given[:3])  # the default names, case aside (`Timestamp`)
    if spelled is not None:
        return spelled[0], spelled[1], spelled[2], given[3], given[4]
    layout = detect_layout(fields)
    if layout is None:
        for i, name in enumerate(given[:3]):
            _spelled(path, fields, name, i)  # two columns that both match a default name are said
        return given  # the loader names the missing column, and the hint the flags
    unit = cast(TimeUnit, flags["time_unit"]) if flags["time_unit"] is not None else layout.unit
    hashes = flags["hash_column"] if flags["hash_column"] is not None else (
        layout.hashes if jsonl and layout.hashes in fields else None)
    # the unit read, in the column's own place: not the layout's and then another (`created (s) ...; times in ms`)
    shown = "date-time" if unit == "datetime" else unit
    said = shown if unit == layout.unit else f"{shown}, as --time-unit says"
    print(f"reading {path.name} as {layout.name}'s columns: {layout.time} ({said}), {layout.prompt}, "
          f"{layout.output} (the column flags override this)", file=sys.stderr)
    return layout.time, layout.prompt, layout.output, unit, hashes


#: the per-minute file loader's own hint names tune's Prometheus flag, which a file does not take (the loader
#: is in every simulation's cache key, so its words are mended where they are shown)
_FILE_SPAN_HINT = " (a shorter span: --since)"
#: the request loaders' own fix for unsorted rows, said in the hint instead (it was said twice)
_SORT_HINT = "; sort them (--sort)"


class SpanError(TraceError):
    """A trace that lasts longer than MOST_SPAN_S as loaded, with its own hint (a --window to cut it to)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def error_line(err: Exception) -> str:
    """A refused input's message on one line, as `simulate` and `tune` print it."""
    line = " ".join(part.strip() for part in str(err).splitlines()) or type(err).__name__
    line = line.replace("pass name= to pick one", "pass --scaledobject-name to pick one")  # the library's word
    if "timestamps not sorted" in line and line.endswith(_SORT_HINT):
        line = line[: -len(_SORT_HINT)]
    return line.replace(_FILE_SPAN_HINT, "") if "requests in all: at most" in line else line


def input_hint(err: Exception, prog: str) -> str:
    """What to do about a refused trace, preset or ScaledObject: the hint `simulate` and `tune` print."""
    text = str(err)
    if isinstance(err, SpanError):
        return err.hint
    if "requests in all: at most" in text:  # a count past any traffic (1e12 in a minute), or a history too long
        return ("check the requests column: each row counts the requests of its minute (not a running total); "
                "a history of more requests than that is too long: keep fewer of its minutes")
    if "a history spans at most" in text:
        return ("check the minute column for a stray date (a wrong year, a 0), or keep fewer of its minutes: "
                "a few weeks hold the daily and weekly cycle")
    if text.startswith("--out "):
        return "--out names a folder, made if missing, for results.json, config.json and replicas.png, e.g. results/"
    if isinstance(err, PresetFileError):
        return "a preset file's keys and forms are in docs/simulator.md, \"Your own model and GPU\""
    if isinstance(err, ScaledObjectError):
        return "--scaledobject takes a KEDA ScaledObject with an external or external-push trigger (deploy/examples/)"
    if "no such file" in text or "unknown trace" in text:
        return f"give a shipped trace ({', '.join(TRACE_NAMES)}) or the path of a CSV/JSONL/per-minute file"
    if "requests but no tokens" in text:
        return ("fill prompt_tokens and output_tokens with each minute's token totals (the exporter's "
                "llm_prompt_tokens_total and llm_generation_tokens_total; `keda-llm tune --from-prometheus "
                "--save-history FILE` writes them)")
    if "minutes not rising" in text:
        return "a per-minute history has one row a minute, in time order: merge or drop the repeated minute"
    if "a per-minute history needs" in text:
        return (f"a per-minute history has the columns {', '.join(MINUTE_COLUMNS)} (case aside): add or rename the one "
                "named")
    if "apart from case" in text:
        return "name the column to read with its flag (--time-column, --prompt-column, --output-column)"
    if "missing field" in text and "the lines before have it" in text:
        return ("a line past the first lacks the field (a failed call logged with no `usage`?): remove such lines, "
                "or name other fields with --time-column/--prompt-column/--output-column")
    if "missing column" in text or "missing field" in text:
        return ("name your columns with --time-column/--prompt-column/--output-column, or use --format minutes "
                f"for a per-minute history ({', '.join(MINUTE_COLUMNS)})")
    if "no requests" in text or "no minutes" in text or "empty file" in text or "no request arrives" in text:
        return "the trace (or its --window) must hold at least one request"
    if "preset" in text:
        return f"presets: {', '.join(sorted(PRESETS))}, or a preset file (docs/simulator.md)"
    if "is not Unix seconds" in text:
        return "a per-minute history's minute is Unix seconds or ISO 8601 (2026-11-24T10:00:00Z), whole minutes"
    if "after the year" in text:
        return "--time-unit ms, us or ns reads epoch milliseconds, microseconds or nanoseconds"
    if "not sorted" in text:
        return "--sort reads the rows in time order (or sort the file by its time column)"
    if "not a date-time" in text or ("not a number" in text and "column" in text):
        return ("--time-unit datetime reads ISO 8601 (2026-11-24T10:00:00.173Z); s, ms, us, ns read numbers; "
                "--time-column names the column")
    if "a directory" in text or "cannot read" in text:
        return "--trace takes a file: CSV, JSONL (.jsonl, .ndjson) or a per-minute CSV, optionally .gz"
    if ("not a whole number of tokens" in text or "not a finite number" in text or "negative" in text) \
            and "line " in text:
        return "every row's time, token counts and request counts are finite numbers >= 0: fix or drop the line named"
    return f"{prog} --help lists the flags"


def shape_trace(tr: Trace, args: argparse.Namespace) -> Trace:
    """--window, --stretch and --rate-scale applied to a loaded trace."""
    if args.window:
        try:
            lo, hi = (float(x) for x in args.window.split(":"))
        except ValueError:
            raise TraceError(f"--window {args.window!r}: expected START:END in seconds, e.g. 0:3600") from None
        if not 0 <= lo < hi:
            raise TraceError(f"--window {args.window!r}: need 0 <= START < END")
        tr = tr.window(lo, hi)
        if len(tr) == 0:
            raise TraceError(f"--window {args.window!r}: no request arrives in it")
    check_span(tr, args.window)
    if args.stretch != 1.0:
        if math.isfinite(args.stretch) and args.stretch > 0 and tr.duration_s * args.stretch > MOST_SPAN_S:
            days = tr.duration_s * args.stretch / 86400
            raise TraceError(f"--stretch {args.stretch:g}: the trace would last {days:.3g} days; at most "
                             f"{MOST_SPAN_S / 86400:.0f}")
        tr = tr.stretch(args.stretch)
    if args.rate_scale != 1.0:
        tr = tr.scale_rate(args.rate_scale, seed=args.seed)
        if len(tr) == 0:  # thinned away: a run on no request "met" the SLO at 0 GPU-hours
            raise TraceError(f"--rate-scale {args.rate_scale:g}: no request is left")
    lead = getattr(args, "lead_in", 0.0)
    if not (math.isfinite(lead) and lead >= 0):
        raise TraceError(f"--lead-in {lead:g}: must be finite and >= 0 seconds (0: no lead-in)")
    return tr.wrapped(lead) if lead > 0 else tr


def check_span(tr: Trace, window: str | None = None) -> None:
    """Refuse a trace that lasts longer than MOST_SPAN_S (after --window, when one is given): years of
    timestamps are a stray row (a 0 among epoch seconds) or a wrong unit, and the simulation of them ran with
    no end. The message names the span and its longest gap (where a stray row sits); the hint, where the
    requests on one side of that gap fit in the bound, the --window that keeps them."""
    span = tr.duration_s
    if span <= MOST_SPAN_S:
        return
    at = tr.arrival_s
    gaps = np.diff(at)
    i = int(np.argmax(gaps))  # a trace this long holds at least two requests
    n, before, after = len(tr), i + 1, len(tr) - i - 1
    where = f" of --window {window}" if window else ""
    message = (f"the trace{where} spans {span / 86400:,.0f} days (first request at 0 s, last at {span:,.0f} s; the "
               f"longest gap, {gaps[i] / 86400:,.0f} days, after request {before:,} of {n:,} in time order); at "
               f"most {MOST_SPAN_S / 86400:.0f}")
    hint = "fix the stray timestamps or cut it with --window START:END"
    lo, hi = (float(at[i + 1]), float(at[-1])) if after >= before else (float(at[0]), float(at[i]))
    # a gap of days is a stray row's; a window's own seconds are re-based, so no suggestion on top of one
    if gaps[i] >= 86400 and hi - lo <= MOST_SPAN_S and not window:
        kept = max(before, after)
        hint += (f", e.g. --window {math.floor(lo):.0f}:{math.floor(hi) + 1:.0f} keeps the {kept:,} "
                 f"request{'s' if kept != 1 else ''} {'after' if after >= before else 'before'} that gap")
    raise SpanError(message, hint)


def _policies(text: str) -> list[str]:
    from keda_llm.simulator.control.policies import POLICIES

    out = [p.strip() for p in text.split(",") if p.strip()]
    if not out:
        raise ValueError("--policies: give at least one policy")
    bad = [p for p in out if p not in POLICIES]
    if bad:
        raise ValueError(f"--policies: unknown policy {bad[0]!r}; known: {', '.join(POLICIES)}")
    if len(set(out)) != len(out):
        raise ValueError("--policies: a policy is listed twice")
    return out


def build(args: argparse.Namespace) -> tuple[Trace, Any, list[str]]:
    """Trace, Backtest and policy list from the arguments; every input error raises with a clear message."""
    from keda_llm.simulator.control.scaler import trigger_config
    from keda_llm.simulator.report.summary import Slo
    from keda_llm.simulator.run import Backtest

    policies = _policies(args.policies)
    preset = preset_arg(args.preset)
    settings = None
    if args.scaledobject:
        settings = load_scaledobject(args.scaledobject, args.scaledobject_name)
        for i, trig in enumerate(settings.triggers):
            if trig.type not in ("external", "external-push"):
                raise ValueError(f"{args.scaledobject}: trigger {i} has type {trig.type!r}; the simulator runs "
                                 "keda-llm's scaler, so give an external or external-push trigger")
            trigger_config(settings, i)  # bad metadata: the scaler's own ConfigError, naming key and value
    # before the trace loads and the run starts (each was a traceback from inside the run)
    if not args.max_wait > 0:  # the router's rule (inf: never dropped)
        raise ValueError(f"--max-wait {args.max_wait:g}: must be more than 0 seconds (inf: never dropped)")
    if not (SLO_TTFT_S[0] <= args.slo_ttft <= SLO_TTFT_S[1] and SLO_ITL_S[0] <= args.slo_itl <= SLO_ITL_S[1]):
        raise ValueError(f"--slo-ttft {args.slo_ttft:g} / --slo-itl {args.slo_itl:g}: the TTFT SLO must be "
                         f"{SLO_TTFT_S[0]:g}-{SLO_TTFT_S[1]:g} s and the ITL SLO {SLO_ITL_S[0]:g}-{SLO_ITL_S[1]:g} s")
    if args.fluid_dt is not None and not 0 < args.fluid_dt <= MOST_FLUID_DT_S:
        raise ValueError(f"--fluid-dt {args.fluid_dt:g}: must be more than 0 and at most {MOST_FLUID_DT_S:g} s "
                         "(the presets' own slices are 0.06-0.25 s)")
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed}: must be >= 0")
    if args.max_replicas is not None and args.max_replicas < 1:  # 0 read as "not given" before
        raise ValueError(f"--max-replicas {args.max_replicas}: must be >= 1")
    max_replicas = args.max_replicas or (settings.max_replicas if settings is not None else 64)
    if max_replicas > MOST_REPLICAS:  # the oracle's cold-start table is sized by it: 2**31 ran out of memory
        raise ValueError(f"{'--max-replicas' if args.max_replicas else 'the ScaledObject: maxReplicaCount'} "
                         f"{max_replicas}: at most {MOST_REPLICAS:,}")
    if args.out is not None:
        check_out_dir(args.out)
    for name in {p.partition("@")[0] for p in policies} & {"dynamo-sla-arima", "dynamo-sla-prophet"}:
        from keda_llm.simulator.control.anchors import DYNAMO_SLA
        from keda_llm.simulator.control.anchors.dynamo import PREDICTORS

        PREDICTORS[DYNAMO_SLA[name]]()  # its extra, checked before the run: a ValueError naming it, not a traceback
    trace = load_trace(args)
    bt = Backtest(preset, cold_start=args.cold_start, slo=Slo(args.slo_ttft, args.slo_itl), seed=args.seed,
                  routing=args.routing, max_wait_s=args.max_wait, max_held=args.max_held, scaledobject=settings,
                  max_replicas=max_replicas,
                  mode=args.mode, fluid_dt_s=args.fluid_dt, gauges=args.gauges)
    return trace, bt, policies


def preset_arg(text: str) -> Preset:
    """--preset: a shipped preset's name or a preset file; a folder is refused as one (resolve_preset would call
    it an unknown preset name)."""
    if text and Path(text).is_dir():
        raise PresetFileError(f"--preset {text}: a folder; a preset file is one YAML file")
    return resolve_preset(text)


def check_out_dir(name: str) -> None:
    """Refuse an --out folder before the run, not after it (a traceback then, and the run lost)."""
    from keda_llm.common.folders import writable_folder_problem

    if not name.strip():
        raise ValueError(f"--out {name!r}: an empty folder name")
    problem = writable_folder_problem(name)
    if problem is not None:
        raise ValueError(f"--out {Path(name)}: {problem}")


def run(args: argparse.Namespace) -> int:
    from keda_llm.scaler.config import ConfigError as MetadataError

    try:
        trace, bt, policies = build(args)
    except (TraceError, ConfigError, ScaledObjectError, MetadataError, ValueError) as err:
        print(f"keda-llm simulate: error: {error_line(err)}; hint: {input_hint(err, 'keda-llm simulate')}",
              file=sys.stderr)
        return 2
    return execute(trace, bt, policies, out=args.out, quiet=args.quiet, trace_arg=args.trace)


def execute(trace: Trace, bt: Any, policies: list[str], *, out: str | None, quiet: bool, trace_arg: str) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from keda_llm.simulator.report.fidelity import at_kv_edge, kv_edge_caveat, requests_run
    from keda_llm.simulator.report.summary import plot, render_table, summarize, to_json, with_oracle_ratio
    from keda_llm.simulator.run import run_policies

    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 160
    console = Console()
    if not console.is_terminal:  # a pipe or file gets the whole table (or $COLUMNS), not 80 columns of ellipses
        console = Console(width=width)
    err_console = Console(stderr=True)
    if not err_console.is_terminal:  # nor its report lines broken at 80 columns, mid-path, in a log
        err_console = Console(stderr=True, width=width, soft_wrap=True)
    mode = bt.resolved_mode(trace)
    err_console.print(f"trace {trace.name}: {len(trace)} requests over {trace.duration_s / 3600:.2f} h; "
                      f"preset {bt.preset.name}; mode {mode}")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err_console, transient=True, disable=quiet)
    tasks: dict[str, Any] = {}

    def tick(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total)
        progress.update(tasks[name], completed=done, total=total)

    with progress:
        results, oracle = run_policies(trace, bt, policies, progress=tick)
    summaries = with_oracle_ratio([summarize(r, bt.slo) for r in results],
                                  bound_gpu_hours=oracle.bound.gpu_hours if oracle and oracle.bound else None)
    preempted = {s.policy: r.engine_totals[0] for s, r in zip(summaries, results, strict=True)}
    caveat = kv_edge_caveat(at_kv_edge(mode, ((s.policy, preempted[s.policy], requests_run(trace)) for s in summaries)))
    if out:  # before the table: a closed stdout (`| head -1`) ends the command there, and the run stays written
        d = Path(out)
        try:
            d.mkdir(parents=True, exist_ok=True)
            config = {"trace": trace_arg, "trace_name": trace.name, "requests": len(trace),
                      "duration_s": trace.duration_s, "policies": policies, **bt.describe(), "resolved_mode": mode,
                      "preemptions": preempted, "caveats": [] if caveat is None else [caveat]}
            # each file to a temporary name, all three renamed at the end: a Ctrl-C or a full disk half way left
            # this run's JSON beside the last run's plot
            written = [d / ".config.part.json", d / ".results.part.json", d / ".replicas.part.png"]
            try:
                written[0].write_text(json.dumps(config, indent=2) + "\n")
                written[1].write_text(to_json(summaries, config) + "\n")
                plot(results, written[2], title=f"{trace.name} on {bt.preset.name}")
                for part in written:
                    part.replace(d / part.name[1:].replace(".part", ""))
            finally:
                for part in written:
                    part.unlink(missing_ok=True)
        except OSError as err:  # checked before the run; a disk that filled up or a folder removed since
            print(f"keda-llm simulate: error: cannot write the results in {d}: {err.strerror or err}; hint: check "
                  "the --out folder (its space and permissions)", file=sys.stderr)
            return 2
    title = f"{trace.name} on {bt.preset.name} (SLO: TTFT <= {bt.slo.ttft_s:g}s, ITL <= {bt.slo.itl_s:g}s)"
    for table in render_table(summaries, title=title, width=console.width):
        console.print(table)
    if oracle is not None:
        err_console.print(f"oracle: {oracle.status()}")
    if caveat is not None:
        err_console.print(f"warning: {caveat}", markup=False, highlight=False)
    if out:
        err_console.print(f"wrote {d / 'results.json'}, {d / 'config.json'}, {d / 'replicas.png'}")
    return 0
