"""`keda-llm tune`: find the cheapest ScaledObject that meets an SLO on a trace, and write it.

    keda-llm tune --trace azure-code-2023 --window 0:1800 --preset llama-3.1-8b/h100 --slo-ttft 2 --slo-itl 0.1 \\
        --out scaledobject.yaml --plot frontier.png

The trace is a shipped one, a CSV/JSONL of requests, a per-minute history (`--format minutes`), or the
model's own history read from Prometheus (`--from-prometheus URL --model M --since 7d`, optionally kept with
`--save-history FILE`). The sweep, the pick and the YAML: simulator/tune.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from keda_llm.simulator.cli import (
    ALIASES,
    MOST_REPLICAS,
    MOST_SPAN_S,
    READING_DEFAULTS,
    SLO_ITL_S,
    SLO_TTFT_S,
    TRACE_NAMES,
    add_trace_arguments,
    error_line,
    file_flags_given,
    input_hint,
    load_trace,
    preset_arg,
    shape_trace,
    slo_seconds,
)
from keda_llm.simulator.cluster.lead_in import LEAD_IN_S
from keda_llm.simulator.hardware.presets import PRESETS, ConfigError, Preset
from keda_llm.simulator.workload.traces import MINUTE_COLUMNS, Trace, TraceError, load_minutes_csv

PROG = "keda-llm tune"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from keda_llm.scaler.config import ITL_SCALINGS
    from keda_llm.simulator.run import MODES
    from keda_llm.simulator.tune import DEFAULT_MAX_REPLICAS, DEFAULT_SCALER_ADDRESS, FULL_GRID, QUICK_GRID

    add_trace_arguments(p, required=False)
    h = p.add_argument_group("or the model's own history, from Prometheus")
    h.add_argument("--from-prometheus", default=None, metavar="URL",
                   help="read requests and tokens per minute of --model from the llm_* series at this Prometheus")
    h.add_argument("--since", default=None, help="how far back (7d, 36h, 90m) [7d]")
    h.add_argument("--until", default=None, help="end of the span: Unix seconds or ISO 8601 [now]")
    h.add_argument("--save-history", default=None, metavar="FILE",
                   help=f"also write the per-minute history here ({', '.join(MINUTE_COLUMNS)})")

    c = p.add_argument_group("cluster and SLO")
    c.add_argument("--preset", default="llama-3.1-8b/h100",
                   metavar="NAME|FILE", help=f"model on GPU type: {', '.join(sorted(PRESETS))}, or a preset file "
                                             "(YAML: your model's config.json on your GPU, docs/simulator.md) "
                                             "[llama-3.1-8b/h100]")
    c.add_argument("--slo-ttft", type=slo_seconds, required=True,
                   help="time-to-first-token SLO: seconds, or a duration (2s, 1500ms)")
    c.add_argument("--slo-itl", type=slo_seconds, required=True,
                   help="mean inter-token latency SLO: seconds, or a duration (100ms)")
    c.add_argument("--target", type=float, default=0.99,
                   help="fraction of all requests that must meet the SLO [0.99]")
    c.add_argument("--cold-start", default=None, choices=("typical", "fast"),
                   help="cold start case [typical; with --from-prometheus: the scaler's measured p90, "
                        "keda_llm_scaler_cold_start_p90_seconds, where Prometheus has it]")
    c.add_argument("--max-replicas", type=int, default=DEFAULT_MAX_REPLICAS,
                   help=f"maxReplicaCount of every candidate, at most 10,000 [{DEFAULT_MAX_REPLICAS}]")

    w = p.add_argument_group("the written ScaledObject")
    w.add_argument("--model", default=None,
                   help="served model name (the trigger's `model`; with --from-prometheus, the `model` label) "
                        "[the preset's model]")
    w.add_argument("--namespace", default=None, help="its namespace [default]; with --from-prometheus also the "
                                                     "`namespace` label the series must carry [any]")
    w.add_argument("--name", default="llm", help="its name, at most 54 characters (KEDA's HPA: keda-hpa-NAME) [llm]")
    w.add_argument("--deployment", default="llm", help="the Deployment it scales [llm]")
    w.add_argument("--scaler-address", default=DEFAULT_SCALER_ADDRESS, help=f"[{DEFAULT_SCALER_ADDRESS}]")
    w.add_argument("--prometheus-address", default=None, metavar="URL",
                   help="the trigger's prometheusAddress, for its activationQuery [the scaler's --prometheus-address]")
    w.add_argument("--out", default=None, metavar="FILE", help="write the ScaledObject here [print it]")
    w.add_argument("--plot", default=None, metavar="PNG", help="draw the frontier here")

    r = p.add_argument_group("run")
    r.add_argument("--quick", action="store_true",
                   help=f"{len(QUICK_GRID.candidates())} candidates (ITL target x mode) instead of "
                        f"{len(FULL_GRID.candidates())}")
    r.add_argument("--itl-scaling", default="proportional", choices=(*ITL_SCALINGS, "both"),
                   help="the candidates' itlScaling; both: every candidate with each, twice the CPU (busy reads "
                        "a replica's ITL above its floor: for a fast-decoding model, docs/design.md) [proportional]")
    r.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes [the CPU count]")
    r.add_argument("--no-oracle", action="store_true",
                   help="skip the references: the oracle, static and the informed reactive schedule")
    r.add_argument("--mode", default="auto", choices=MODES, help="simulator mode [auto]")
    r.add_argument("--seed", type=int, default=0, help="seed for cold starts and synthesized arrivals [0]")
    r.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="run every candidate with the cold starts drawn N times (seeds --seed .. --seed+N-1) and "
                        "count its worst SLO attainment at its mean GPU-hours: a pick that holds on every draw, "
                        "N times the CPU; at most 1,000 [1]")
    r.add_argument("--phases", type=int, default=1, metavar="N",
                   help="also run every candidate with the arrivals moved by 0, 15/N, ... s against the control "
                        "loop and count each seed's mean over them: on an hour of bursty traffic one phase can "
                        "flatter a pick (docs/tune.md); N times the CPU; at most 60 [1]")
    r.add_argument("--holdout", default=None, metavar="SPAN",
                   help="tune on the trace but its last SPAN (1d, 6h, 90m; at least a minute), then run the pick on "
                        "that SPAN, which it was not chosen on, and report it (exit 3 when the pick meets the target "
                        "on the tuned part and misses it there) [off]")
    r.add_argument("--quiet", action="store_true", help="no progress bar")


class _Refused(Exception):
    """An input error: one line, with a hint."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _hint(err: Exception, args: argparse.Namespace) -> str:
    """By what the error says, not by words a file's name may hold (a trace in `spans.csv` is no --since)."""
    text = str(err)
    if text.startswith(("holdout ", "--holdout ")):
        return "--holdout takes a span of at least a minute and shorter than the trace: 1d, 6h, 90m"
    if args.from_prometheus is not None and "span" in text:
        return "--since (with --until) gives the span to read: 7d, 36h, 90m"
    if args.from_prometheus is not None and "Prometheus" in text:
        return "check the URL (e.g. http://prometheus.monitoring:9090), --model, --namespace and --since"
    return input_hint(err, PROG)


def _history(args: argparse.Namespace, model: str) -> Trace:
    from keda_llm.simulator.workload.history import export_minutes, parse_span, parse_time, write_minutes_csv

    args.since = args.since or "7d"
    end = _until(args.until, parse_time) if args.until is not None else time.time()
    args.until_resolved = end  # the header's command reads the same span again later
    span = parse_span(args.since)
    if span > MOST_SPAN_S:  # refused before a query: 500 days were read whole first, then refused
        raise _Refused(f"--since {args.since}: {span / 86400:,.0f} days; a history spans at most "
                       f"{MOST_SPAN_S / 86400:.0f}", "a few weeks hold the daily and weekly cycle, e.g. --since 14d")
    start = end - span
    dropped: Counter[str] = Counter()
    minutes = export_minutes(args.from_prometheus, model, start, end, namespace=args.namespace, dropped=dropped)
    where = (f"Prometheus at {args.from_prometheus}, model {model!r}"
             f"{f' in namespace {args.namespace!r}' if args.namespace else ''}, the last {args.since}")
    if dropped["non_finite"] or dropped["negative"]:
        print(f"warning: {where}: {dropped['non_finite']:,} NaN or infinite point(s) read as no traffic, "
              f"{dropped['negative']:,} negative rate(s) as 0", file=sys.stderr)
    if not any(m.requests > 0 for m in minutes):
        raise TraceError(f"{where}: no requests")
    if not any(m.prompt_tokens > 0 or m.output_tokens > 0 for m in minutes):
        # requests without a token: every request would be replayed as a one-token request, and the pick, tuned
        # on traffic that costs nothing, written with exit 0
        raise _Refused(f"{where}: requests but no tokens (no llm_prompt_tokens_total or llm_generation_tokens_total "
                       "series for it)", "the exporter writes both for every engine it reads: check that it "
                       "scrapes this model's replicas and that Prometheus keeps those series")
    path = Path(args.save_history) if args.save_history else None
    if path is None:
        import tempfile

        fd, name = tempfile.mkstemp(suffix=".csv")
        os.close(fd)
        path = Path(name)
    comment = f"{model} from {args.from_prometheus}, {args.since} to {args.until or 'now'}"
    write_minutes_csv(minutes, path, comment)
    try:
        tr = load_minutes_csv(path, seed=args.seed, name=f"{model} (Prometheus, {args.since})")
    except TraceError as err:  # named by the temporary file it went through, gone by the time the user reads it
        shown = str(err).replace(f"{path}: ", "").replace(str(path), "the history")
        raise TraceError(f"{where}: {shown}") from None
    finally:
        if not args.save_history:
            path.unlink()
    return shape_trace(tr, args)


#: how far past this machine's clock --until may be (another machine's clock, a time zone slip); past it the
#: span is the future, which no Prometheus holds
UNTIL_SLACK_S = 86400.0


def _until(text: str, parse_time: Callable[[str], float]) -> float:
    """--until as Unix seconds: a time Prometheus can hold (finite, from 1970, not past tomorrow), else a
    _Refused naming the flag (NaN was "cannot convert float NaN to integer", 1e30 a span of no minute)."""
    hint = "Unix seconds or ISO 8601, e.g. --until 2026-11-24T10:00:00Z; leave it out for now"
    try:
        end = parse_time(text)
    except ValueError as err:  # HistoryError is a ValueError
        raise _Refused(f"--until {text!r}: {err}", hint) from None
    if not (math.isfinite(end) and 0 <= end <= time.time() + UNTIL_SLACK_S):
        raise _Refused(f"--until {text!r}: not a time Prometheus holds (from 1970 to now)", hint)
    return end


def _measured_cold_start(args: argparse.Namespace, model: str, preset: Preset) -> Preset:
    """The preset with its cold start scaled to the scaler's measured p90, where Prometheus has it and no
    --cold-start case was asked for; said on stderr either way."""
    from keda_llm.simulator.workload.history import COLD_START_P90, HistoryError, measured_cold_start_p90, parse_span

    if args.cold_start is not None:
        return preset
    modelled = preset.cold_start("typical").quantile(0.9)
    try:
        measured = measured_cold_start_p90(args.from_prometheus, model, args.until_resolved, parse_span(args.since),
                                           namespace=args.namespace)
    except HistoryError as err:  # the history came; its cold start is a refinement, not a reason to stop
        print(f"cold start: {err}; the preset's p90, {modelled:.0f} s", file=sys.stderr)
        return preset
    if measured is None:
        print(f"cold start: no {COLD_START_P90} for {model!r} in Prometheus; the preset's p90, {modelled:.0f} s",
              file=sys.stderr)
        return preset
    if not COLD_START_RANGE_S[0] <= measured <= COLD_START_RANGE_S[1]:
        print(f"cold start: the scaler measured a p90 of {measured:g} s, outside what a ScaledObject's coldStart "
              f"takes ({COLD_START_RANGE_S[0]:g} s to {COLD_START_RANGE_S[1] / 3600:g} h); the preset's p90, "
              f"{modelled:.0f} s (--cold-start typical|fast says so outright)", file=sys.stderr)
        return preset
    print(f"cold start: the scaler measured a p90 of {measured:.0f} s ({COLD_START_P90}); the preset's phases "
          f"scaled from {modelled:.0f} s to it", file=sys.stderr)
    return preset.with_changes(cold_start_scale=measured / modelled)


#: the measured cold starts the written `coldStart` can carry (the scaler's metadata takes up to 24 h)
COLD_START_RANGE_S = (1.0, 86400.0)
#: less than this much traffic, or this many requests, and a pick says little (a warning, not a refusal)
SHORT_TRACE_S, FEW_REQUESTS = 1800.0, 100
#: the longest ScaledObject name KEDA takes: `keda-hpa-` and it name the HPA, a label value of at most 63 (KEDA
#: 2.20's admission webhook: kedacore/keda #6998, #7762; before it, past 63 KEDA took the object and never made its HPA)
MOST_NAME = 63 - len("keda-hpa-")
#: seeds enough for any confidence; the sweep lists every (candidate, seed) run before the first starts
MOST_SEEDS = 1_000
#: phases enough to cover the HPA's 15 s sync period every quarter second
MOST_PHASES = 60


def _check_writable(flag: str, name: str) -> None:
    """Refuse an output path before the sweep, not after it: a name, its folder existing, no folder itself, and
    a file that can be written there (a probe: root passes every permission check, and /proc or a read-only
    mount refuse only the write)."""
    if not name.strip():
        raise _Refused(f"{flag} {name!r}: an empty file name", f"e.g. {flag} {_EXAMPLE_NAMES[flag]}")
    path = Path(name)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise _Refused(f"{flag} {path}: a directory", f"{flag} takes a file name, e.g. {flag} {path / 'out'}")
    if not folder.is_dir():
        raise _Refused(f"{flag} {path}: cannot write there, no folder {folder}", f"create it first: mkdir -p {folder}")
    if path.exists() and not os.access(path, os.W_OK):
        raise _Refused(f"{flag} {path}: cannot write the file", "pick a file you can write, or a new name")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".keda-llm-tune-"):
            pass
    except OSError as err:
        raise _Refused(f"{flag} {path}: cannot write in {folder}: {err.strerror or err}",
                       "pick a folder you can write to") from None


#: what each output flag's hint suggests for an empty name
_EXAMPLE_NAMES = {"--out": "scaledobject.yaml", "--plot": "frontier.png", "--save-history": "history.csv"}


def build(args: argparse.Namespace) -> tuple[Trace, Any, Any, Any, Trace | None]:
    """(trace, Backtest, Target, Grid, the held-out trace or None) from the arguments; every input error raises
    with a clear message."""
    from keda_llm.common.addresses import host_port
    from keda_llm.scaler.config import ITL_SCALINGS
    from keda_llm.simulator.report.summary import Slo
    from keda_llm.simulator.run import Backtest
    from keda_llm.simulator.tune import DEFAULT_SCALER_ADDRESS, FULL_GRID, QUICK_GRID, Target, candidate

    preset = preset_arg(args.preset)
    if (args.trace is None) == (args.from_prometheus is None):
        raise _Refused("give --trace or --from-prometheus (one of them)",
                       f"--trace NAME|FILE (shipped: {', '.join(TRACE_NAMES)}) or --from-prometheus URL --model M")
    if not 0 < args.target <= 1:
        raise _Refused(f"--target {args.target:g}: must be in (0, 1]", "0.99 = 99% of requests meet the SLO")
    if not (SLO_TTFT_S[0] <= args.slo_ttft <= SLO_TTFT_S[1] and SLO_ITL_S[0] <= args.slo_itl <= SLO_ITL_S[1]):
        raise _Refused(f"--slo-ttft {args.slo_ttft:g} / --slo-itl {args.slo_itl:g}: the TTFT SLO must be "
                       f"{SLO_TTFT_S[0]:g}-{SLO_TTFT_S[1]:g} s and the ITL SLO {SLO_ITL_S[0]:g}-{SLO_ITL_S[1]:g} s",
                       "e.g. --slo-ttft 2 --slo-itl 0.1")
    for flag in ("workers", "max_replicas", "seeds", "phases"):
        if getattr(args, flag) < 1:
            name = "--" + flag.replace("_", "-")
            raise _Refused(f"{name} {getattr(args, flag)}: must be >= 1", f"e.g. {name} 1 (see {PROG} --help)")
    if args.max_replicas > MOST_REPLICAS:  # the oracle's cold-start table is sized by it: 2**31 ran out of memory
        raise _Refused(f"--max-replicas {args.max_replicas}: at most {MOST_REPLICAS:,}",
                       "the most replicas the Deployment may run, e.g. --max-replicas 16")
    if args.seeds > MOST_SEEDS:
        raise _Refused(f"--seeds {args.seeds}: at most {MOST_SEEDS:,} (each one runs every candidate again)",
                       "a few draws tell a lucky pick from a sound one, e.g. --seeds 4")
    if args.phases > MOST_PHASES:
        raise _Refused(f"--phases {args.phases}: at most {MOST_PHASES} (each one runs every candidate again)",
                       "a few phases across the HPA's 15 s sync tell a lucky pick from a sound one, e.g. --phases 6")
    if args.seed < 0:
        raise _Refused(f"--seed {args.seed}: must be >= 0", "any whole number from 0, e.g. --seed 1")
    for flag, out in (("--out", args.out), ("--plot", args.plot)):
        if out is not None:
            _check_writable(flag, out)
    if args.plot is not None:
        _check_image_format(Path(args.plot))
    _check_unused_flags(args)
    if args.save_history is not None:
        _check_writable("--save-history", args.save_history)
    _check_distinct_files(args)
    if args.model is not None and (not args.model.strip() or args.model != args.model.strip()):
        raise _Refused(f"--model {args.model!r}: {'empty' if not args.model.strip() else 'blanks around the name'}",
                       "the served model name, as the engines label it, e.g. --model meta-llama/Llama-3.1-8B-Instruct")
    try:
        host, port = host_port(args.scaler_address)
        if not host or port == 0:
            raise ValueError("a host and a port from 1")
    except ValueError as err:
        raise _Refused(f"--scaler-address {args.scaler_address!r}: not host:port ({err})",
                       f"KEDA dials the scaler there, e.g. --scaler-address {DEFAULT_SCALER_ADDRESS}") from None
    for flag, value, pattern, most in (("--name", args.name, _DNS_SUBDOMAIN, 253),
                                       ("--namespace", args.namespace, _DNS_LABEL, 63),
                                       ("--deployment", args.deployment, _DNS_SUBDOMAIN, 253)):
        if value is not None and not (pattern.fullmatch(value) and len(value) <= most):
            dots = " and '.'" if pattern is _DNS_SUBDOMAIN else ""
            raise _Refused(f"{flag} {value!r}: not a Kubernetes name (lower-case letters, digits and '-'{dots}, "
                           f"at most {most}, starting and ending with a letter or digit)",
                           f"e.g. {flag} {_dns_like(value)}")
    if len(args.name) > MOST_NAME:
        raise _Refused(f"--name {args.name[:20]}...: {len(args.name)} characters, KEDA takes at most {MOST_NAME} (its "
                       f"HPA is keda-hpa-NAME, a label value of at most 63: KEDA 2.20 refuses more, and past 63 no "
                       "KEDA creates the HPA)", f"e.g. --name {args.name[:MOST_NAME].rstrip('-.')}")
    if args.prometheus_address is not None and not args.prometheus_address.startswith(("http://", "https://")):
        raise _Refused(f"--prometheus-address {args.prometheus_address!r}: not an http:// or https:// URL",
                       f"e.g. --prometheus-address http://{args.prometheus_address.split('://')[-1]}")
    model = args.model if args.model is not None else preset.model.name  # "" is refused above, not replaced
    if args.from_prometheus is not None:
        if args.model is None:
            raise _Refused("--from-prometheus needs --model (the `model` label of the llm_* series)",
                           "the served model name, e.g. --model meta-llama/Llama-3.1-8B-Instruct")
        trace = _history(args, model)
        preset = _measured_cold_start(args, model, preset)
    else:
        trace = load_trace(args)
    case = args.cold_start or "typical"  # the flag stays as given: the header's command repeats only what was
    held = None
    if args.holdout is not None:
        from keda_llm.simulator.tune import split_holdout
        from keda_llm.simulator.workload.history import HistoryError, parse_span

        try:
            span = parse_span(args.holdout)
        except HistoryError as err:
            raise TraceError(f"--holdout {args.holdout!r}: {err}") from None
        trace, held = split_holdout(trace, span)
    slo = Slo(args.slo_ttft, args.slo_itl)
    bt = Backtest(preset, cold_start=case, slo=slo, seed=args.seed, max_replicas=args.max_replicas,
                  mode=args.mode)
    target = Target(model=model, name=args.name, namespace=args.namespace or "default", deployment=args.deployment,
                    max_replicas=args.max_replicas, scaler_address=args.scaler_address,
                    prometheus_address=args.prometheus_address)
    grid = QUICK_GRID if args.quick else FULL_GRID
    # minReplicaCount above maxReplicaCount is not a ScaledObject KEDA takes
    grid = dataclasses.replace(grid, min_replicas=tuple(m for m in grid.min_replicas if m <= args.max_replicas),
                               itl_scaling=ITL_SCALINGS if args.itl_scaling == "both" else (args.itl_scaling,))
    # any metadata the flags make invalid (the scaler's own ConfigError) is one line here, not a worker's traceback
    candidate(grid.candidates()[0], target, slo_itl_s=args.slo_itl, slo_ttft_s=args.slo_ttft,
              cold_start_s=preset.cold_start(case).quantile(0.9))
    return trace, bt, target, grid, held


#: DNS-1123: a namespace is a label; a ScaledObject and a Deployment are subdomains (labels joined by dots)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _dns_like(value: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-")
    return name or "llm"


def _check_distinct_files(args: argparse.Namespace) -> None:
    """--out, --plot, --save-history and a --trace file are four files: one written over another lost it (`--out`
    on the trace replaced the user's traffic with YAML; `--out x.png --plot x.png` the ScaledObject with a plot)."""
    files = [(flag, value) for flag, value in (("--trace", args.trace), ("--out", args.out), ("--plot", args.plot),
                                               ("--save-history", args.save_history))
             if value is not None and (flag != "--trace" or Path(value).is_file())]
    seen: dict[Path, str] = {}
    for flag, value in files:
        where = Path(value).resolve()
        if where in seen:
            raise _Refused(f"{seen[where]} and {flag} name the same file ({value}): one would be written over the "
                           "other", "give each its own name, e.g. --out so.yaml --plot frontier.png")
        seen[where] = flag


#: formats matplotlib lists but renders only through outside programs (pgf: a LaTeX install), not checked up front
_NEEDS_A_PROGRAM = frozenset({"pgf"})


def _check_image_format(path: Path) -> None:
    from matplotlib.figure import Figure

    formats = set(Figure().canvas.get_supported_filetypes()) - _NEEDS_A_PROGRAM
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        raise _Refused(f"--plot {path}: {f'.{suffix} is not an image format' if suffix else 'no image suffix'}",
                       f"end the name in .png, .svg or .pdf (any of {', '.join(sorted(formats))})")


def _check_unused_flags(args: argparse.Namespace) -> None:
    """A flag that the chosen input does not read is refused, not ignored: the user meant something by it."""
    if args.from_prometheus is None:
        for flag, value in (("--since", args.since), ("--until", args.until), ("--save-history", args.save_history)):
            if value is not None:
                raise _Refused(f"{flag} reads history from Prometheus: it needs --from-prometheus, not --trace",
                               "drop it, or give --from-prometheus URL --model M")
        return
    given = file_flags_given(args)
    if given:
        raise _Refused(f"{given[0]} applies to a --trace file, not to --from-prometheus", "drop it")


def run(args: argparse.Namespace) -> int:
    from keda_llm.scaler.config import ConfigError as MetadataError
    from keda_llm.simulator.control import ScaledObjectError
    from keda_llm.simulator.workload.history import HistoryError

    try:
        trace, bt, target, grid, held = build(args)
    except _Refused as err:
        print(f"{PROG}: error: {err}; hint: {err.hint}", file=sys.stderr)
        return 2
    except (TraceError, ConfigError, ScaledObjectError, MetadataError, HistoryError, ValueError) as err:
        print(f"{PROG}: error: {error_line(err)}; hint: {_hint(err, args)}", file=sys.stderr)
        return 2
    except OSError as err:  # --save-history
        print(f"{PROG}: error: cannot write: {err}; hint: check the --save-history path", file=sys.stderr)
        return 2
    return execute(args, trace, bt, target, grid, held)


def _command(args: argparse.Namespace) -> str:
    """The command line that writes this ScaledObject again (output paths and run options left out)."""
    from keda_llm.simulator.tune import DEFAULT_MAX_REPLICAS, DEFAULT_SCALER_ADDRESS

    parts = ["keda-llm", "tune"]
    if args.trace is not None:
        parts += ["--trace", ALIASES.get(args.trace, args.trace)]  # a file as given: run again from the same place
        if getattr(args, "format", "auto") != "auto":
            parts += ["--format", args.format]
        for flag in READING_DEFAULTS:  # the flags given (None: not given)
            if getattr(args, flag, None) is not None:
                parts += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        if getattr(args, "sort", False):
            parts.append("--sort")
    else:
        until = getattr(args, "until_resolved", None)
        parts += ["--from-prometheus", args.from_prometheus, "--since", args.since or "7d"]
        if until is not None:  # an absolute end: the same span when run again later
            parts += ["--until", datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
    if args.window:
        parts += ["--window", args.window]
    for name, one in (("stretch", 1.0), ("rate_scale", 1.0), ("lead_in", LEAD_IN_S)):
        if getattr(args, name) != one:
            parts += [f"--{name.replace('_', '-')}", f"{getattr(args, name):g}"]
    parts += ["--preset", args.preset, "--slo-ttft", f"{args.slo_ttft:g}", "--slo-itl", f"{args.slo_itl:g}",
              "--target", f"{args.target:g}"]
    defaults = {"cold_start": None, "max_replicas": DEFAULT_MAX_REPLICAS, "mode": "auto", "seed": 0,
                "model": None, "namespace": None, "name": "llm", "deployment": "llm",
                "scaler_address": DEFAULT_SCALER_ADDRESS, "prometheus_address": None,
                "itl_scaling": "proportional"}
    for key, default in defaults.items():
        if getattr(args, key) != default:
            parts += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.seeds != 1:
        parts += ["--seeds", str(args.seeds)]
    if args.phases != 1:
        parts += ["--phases", str(args.phases)]
    if args.holdout is not None:
        parts += ["--holdout", args.holdout]
    if args.quick:
        parts.append("--quick")
    return shlex.join(parts)


def execute(args: argparse.Namespace, trace: Trace, bt: Any, target: Any, grid: Any, held: Trace | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from keda_llm.simulator.report.reactive import HOLDS, QUICK_HOLDS
    from keda_llm.simulator.tune import (
        COST_TIE,
        check_holdout,
        fidelity_note,
        holdout_line,
        model_note,
        plot,
        reactive_line,
        render_yaml,
        static_line,
        tune,
    )

    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 160
    err_console = Console(stderr=True)
    if not err_console.is_terminal:  # report lines whole in a log, not broken at its width
        err_console = Console(stderr=True, width=width, soft_wrap=True)
    # the YAML alone on stdout when it is printed (`> so.yaml`, `| kubectl apply -f -`); the report beside it
    console = Console() if args.out else err_console
    if not console.is_terminal:
        console = Console(width=width, stderr=console.stderr)
    n = len(grid.candidates())
    seeds = tuple(range(args.seed, args.seed + args.seeds))
    runs = n * len(seeds) * args.phases
    err_console.print(f"trace {trace.name}: {len(trace)} requests over {trace.duration_s / 3600:.2f} h; "
                      f"preset {bt.preset.name}; mode {bt.resolved_mode(trace)}; {n} candidates"
                      + (f" x {len(seeds)} seeds" if len(seeds) > 1 else "")
                      + (f" x {args.phases} phases" if args.phases > 1 else "")
                      + f" on {min(args.workers, runs)} worker(s)")
    # no --model: the preset's name is written, which no engine serves under unless started so (one line, as is)
    preset_model = target.model if args.model is None else None
    if preset_model is not None:
        print(f"warning: {model_note(preset_model)}", file=sys.stderr)
    if trace.duration_s < SHORT_TRACE_S or len(trace) < FEW_REQUESTS:
        minutes = math.floor(trace.duration_s / 6) / 10  # rounded down: 29.96 minutes read "30.0", under 30
        err_console.print(f"warning: {len(trace)} requests over {minutes:.1f} minutes: a pick on less "
                          f"than {SHORT_TRACE_S / 60:g} minutes or {FEW_REQUESTS} requests of traffic says little "
                          "(docs/tune.md, Limits)")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err_console, transient=True, disable=args.quiet)
    task = progress.add_task("sweep", total=runs + (0 if args.no_oracle else 2))  # tune() reports the full total
    try:
        with progress:
            result = tune(trace, bt, target, grid=grid, target=args.target, workers=args.workers,
                          with_references=not args.no_oracle, seeds=seeds, phases=args.phases,
                          reactive_holds=QUICK_HOLDS if args.quick else HOLDS,
                          progress=lambda done, total: progress.update(task, completed=done, total=total))
            holdout = None
            if held is not None:
                progress.update(task, description="held out")
                holdout = check_holdout(result, held, bt, with_reference=not args.no_oracle)
    except KeyboardInterrupt:  # the sweep stopped (its workers too, simulator/tune.py `_stop`): nothing to write
        print(f"{PROG}: interrupted: nothing written; hint: --quick (4 candidates) or a shorter --window runs in "
              "less time", file=sys.stderr)
        return 130
    text = render_yaml(result, trace=trace, backtest=bt, command=_command(args), holdout=holdout,
                       preset_model=preset_model)
    existed = {f: Path(f).exists() for f in (args.out, args.plot) if f}
    # the files first: a closed stdout (`| head -1`) ends the command at the report, and the sweep stays written.
    # Each to a temporary name beside it, both renamed once both are whole: a Ctrl-C while the plot was drawn left
    # the YAML written and no plot, where "interrupted" says nothing was
    parts = {f: Path(f).with_name(f".{Path(f).stem}.part{Path(f).suffix}") for f in (args.out, args.plot) if f}
    try:
        try:
            if args.out:
                parts[args.out].write_text(text)
            if args.plot:
                plot(result, parts[args.plot], title=f"{trace.name} on {bt.preset.name}: TTFT <= {bt.slo.ttft_s:g}s, "
                                                     f"ITL <= {bt.slo.itl_s:g}s")
            for final, part in parts.items():
                part.replace(final)
        finally:
            for part in parts.values():
                part.unlink(missing_ok=True)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted: nothing written", file=sys.stderr)
        return 130
    except (OSError, RuntimeError, ValueError) as err:  # RuntimeError, ValueError: matplotlib's, for a format
        print(f"{PROG}: error: cannot write: {err}; hint: check the --out/--plot path", file=sys.stderr)
        return 2
    console.print(frontier_table(result, bt))
    c = result.chosen
    if result.feasible_share is not None and result.feasible_share < result.target:
        console.print(f"only {100 * result.feasible_share:.1f}% of requests can meet the SLO at all (a lone request's "
                      f"own prefill or decode takes longer): no ScaledObject reaches the {100 * result.target:g}% "
                      "target on this preset")
    if result.met:
        console.print(f"recommended: {100 * c.attainment:.1f}% of requests met the SLO at {c.gpu_hours:.2f} "
                      f"GPU-hours, the cheapest of the points meeting the {100 * result.target:g}% target (within "
                      f"{100 * COST_TIE:g}% of the cheapest's GPU-hours, the most requests within the SLO)")
    else:
        console.print(f"[bold]no point met the {100 * result.target:g}% target[/bold]; written: the best attainment, "
                      f"{100 * c.attainment:.1f}% at {c.gpu_hours:.2f} GPU-hours. Raise --max-replicas, relax the SLO "
                      "or the target"
                      + (", or run without --no-oracle for the oracle's line: what no autoscaler can beat."
                         if args.no_oracle else ", or look at the oracle's line above: what no autoscaler can beat."))
    note = fidelity_note(result)
    if note is not None:
        err_console.print(f"warning: {note}", markup=False, highlight=False)
    static = static_line(result)
    if static is not None:
        console.print(static, markup=False, highlight=False)
    reactive_text = reactive_line(result)
    if reactive_text is not None:
        console.print(reactive_text, markup=False, highlight=False)
    if holdout is not None:
        console.print(holdout_line(holdout), markup=False, highlight=False)
    if args.out:
        err_console.print(f"{'overwrote' if existed[args.out] else 'wrote'} {args.out}")
    else:  # the YAML alone on stdout; a closed pipe here is keda_llm.cli's to end quietly
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    if args.plot:
        err_console.print(f"{'overwrote' if existed[args.plot] else 'wrote'} {args.plot}")
    if not result.met:
        return 1
    return 3 if holdout is not None and not holdout.met else 0


def frontier_table(result: Any, bt: Any) -> Any:
    """The frontier (and the pick, the oracle and static beside it) as a rich Table."""
    from rich.table import Table

    cold = bt.preset.cold_start(bt.cold_start).quantile(0.9)
    t = Table(title=f"frontier: {len(result.frontier)} of {len(result.points)} points "
                    f"(target {100 * result.target:g}% of requests)")
    t.caption = ("ITL target: targetInterTokenLatency, KV target: targetKVUtilization, min: minReplicaCount, "
                 "TTFT target: targetTimeToFirstToken")
    for col in ("", "ITL target", "KV target", "scaleDownDelay", "mode", "min", "TTFT target", "ITL scaling",
                "SLO met", "GPU-h", "cold starts"):
        t.add_column(col, justify="right" if col in ("min", "SLO met", "GPU-h", "cold starts") else "left",
                     no_wrap=True)
    chosen = result.chosen
    shown = result.frontier + ([] if chosen in result.frontier else [chosen])
    for p in sorted(shown, key=lambda p: p.gpu_hours):
        mark = "->" if p is chosen else ""
        k = p.knobs.describe(bt.slo.itl_s, cold, bt.slo.ttft_s)
        t.add_row(mark, *k.values(), f"{100 * p.attainment:.2f}%", f"{p.gpu_hours:.2f}", str(p.cold_starts))
    for name, ref in (("oracle", result.oracle), ("static (peak)", result.static)):
        if ref is not None:
            t.add_row("", name, "", "", "", "", "", "", f"{100 * ref.attainment:.2f}%", f"{ref.gpu_hours:.2f}", "")
    if result.reactive:  # the cheapest informed reactive setting meeting the target, else its best
        from keda_llm.simulator.report.reactive import best_of

        r = result.reactive_meeting or best_of(result.reactive)
        t.add_row("", f"informed reactive x{r.headroom:g}", "", f"{r.hold}m hold", "", "", "", "",
                  f"{100 * r.attainment:.2f}%", f"{r.gpu_hours:.2f}", "")
    return t
