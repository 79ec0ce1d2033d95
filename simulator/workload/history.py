"""A model's per-minute history from Prometheus: requests, prompt and output tokens per minute.

The exporters' counters (`llm_requests_finished_total`, `llm_prompt_tokens_total`,
`llm_generation_tokens_total`, common/vocabulary.py) summed over the model's replicas, as rates over 1 m
at a 60 s step, times 60: each point is one minute's count. A range query may return at most 11,000
points per series (Prometheus refuses more: "exceeded maximum resolution of 11,000 points per timeseries",
prometheus/prometheus web/api/v1/api.go), so a long span is asked for in chunks of at most that many
minutes. The rows go to the per-minute CSV that `load_minutes_csv` reads (simulator/workload/traces.py), which the
tuner synthesizes into requests as it does the Azure 2024 trace.

Finished requests stand in for arrivals (the exporters count requests when they end); at a minute's
resolution the difference is the length of a request. A minute with no point (no replica, hence no series)
is left out of the file and read back as a minute without requests. The scrape interval must be under 1 m
for a 1 m rate to have two samples (Prometheus' default is 1 m; ours, deploy/, 15 s).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from keda_llm.common.durations import parse_duration
from keda_llm.common.httpget import FetchError, fetch
from keda_llm.common.times import iso_seconds
from keda_llm.common.vocabulary import ENGINE_METRICS
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.promql import NO_PARTIAL, parse_query_response, parse_range_response
from keda_llm.simulator.workload.traces import MINUTE_COLUMNS

#: points per series in one range query: Prometheus refuses (end - start) / step > 11,000 (web/api/v1/api.go)
MAX_POINTS = 11_000
STEP_S = 60
MAX_BYTES = 64 * 1024 * 1024
_COUNTERS = {"requests": "requests_finished_total", "prompt_tokens": "prompt_tokens_total",
             "output_tokens": "generation_tokens_total"}
_NAME = {m.field: m.name for m in ENGINE_METRICS}
Fetch = Callable[..., tuple[int, bytes]]


class HistoryError(ValueError):
    """Prometheus could not give the history; the message says what and where."""


def _label_value(text: str) -> str:
    return json.dumps(text)  # a PromQL string literal: double quotes, backslash escapes


#: where a model runs as prefill and decode pools (docs/pools.md) each request passes both: its prompt is
#: counted where it is computed (not on decode servers) and the request and its answer where it ends (not on
#: prefill servers, which finish their part after one token); a unified server counts all three
_ROLE = {"requests": 'role!="prefill"', "prompt_tokens": 'role!="decode"', "output_tokens": 'role!="prefill"'}


def _selector(model: str, namespace: str | None) -> str:
    return f"model={_label_value(model)}" + (f",namespace={_label_value(namespace)}" if namespace else "")


def _get(url: str, api: str, params: dict[str, str], timeout_s: float, get: Fetch) -> bytes:
    """One Prometheus API answer (a whole one: partial answers are declined), or HistoryError."""
    try:
        _, body = get(f"{url.rstrip('/')}/api/v1/{api}", timeout=timeout_s, max_bytes=MAX_BYTES,
                      params={**params, **NO_PARTIAL}, ok_statuses=(200, 400, 422))
    except FetchError as e:
        raise HistoryError(f"Prometheus at {url}: {e}") from None
    return body


def queries(model: str, namespace: str | None = None) -> dict[str, str]:
    """column -> PromQL for one minute's count of it, at each step."""
    sel = _selector(model, namespace)
    return {col: f"60 * sum(rate({_NAME[field]}{{{sel},{_ROLE[col]}}}[1m]))" for col, field in _COUNTERS.items()}


def chunks(start: int, end: int, step: int = STEP_S, max_points: int = MAX_POINTS) -> list[tuple[int, int]]:
    """[start, end] (evaluation times, a step apart) cut into pieces of at most `max_points` points each."""
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    out = []
    t = start
    while t <= end:
        last = min(end, t + (max_points - 1) * step)
        out.append((t, last))
        t = last + step
    return out


def query_range(url: str, promql: str, start: int, end: int, step: int = STEP_S, *, timeout_s: float = 60.0,
                get: Fetch = fetch, dropped: Counter[str] | None = None) -> dict[int, float]:
    """timestamp -> value of a query that returns at most one series (empty when it returns none). A NaN or
    infinite value is no value (a minute without it counts 0), counted in `dropped["non_finite"]`."""
    body = _get(url, "query_range", {"query": promql, "start": str(start), "end": str(end), "step": str(step)},
                timeout_s, get)
    try:
        result = parse_range_response(body, promql)  # the scaler's parser: one reading of Prometheus' answers
    except SourceError as e:
        why = {"api_error": "refused the query", "partial": "gave a partial answer (a store did not answer)"}.get(
            e.reason, "gave an answer that is not a matrix")
        raise HistoryError(f"Prometheus at {url} {why}: {e.message}") from None
    if len(result) > 1:
        raise HistoryError(f"Prometheus at {url}: {promql!r} gave {len(result)} series, expected one")
    points = [(round(ts), v) for series in result for ts, v in series.points]
    good = {ts: v for ts, v in points if math.isfinite(v)}
    if dropped is not None:
        dropped["non_finite"] += len(points) - len(good)
    return good


@dataclass(frozen=True)
class Minute:
    start: int  # Unix seconds, a multiple of 60
    requests: float
    prompt_tokens: float
    output_tokens: float


def export_minutes(url: str, model: str, start: float, end: float, *, namespace: str | None = None,
                   max_points: int = MAX_POINTS, timeout_s: float = 60.0, get: Fetch = fetch,
                   dropped: Counter[str] | None = None) -> list[Minute]:
    """The model's minutes in [start, end) (Unix seconds, rounded down to whole minutes), oldest first.

    What Prometheus gives that no traffic can be is read as none and counted in `dropped`, for the caller to
    say: "non_finite" (NaN or infinite points: no value) and "negative" (a negative rate, a counter that went
    back without a reset Prometheus saw: 0)."""
    first = int(start // STEP_S) * STEP_S + STEP_S  # the point at t counts the minute (t - 60, t]
    last = int(end // STEP_S) * STEP_S
    if last < first:
        raise HistoryError(f"the span {start:g}..{end:g} holds no whole minute")
    cols: dict[str, dict[int, float]] = {c: {} for c in _COUNTERS}
    for col, promql in queries(model, namespace).items():
        for lo, hi in chunks(first, last, STEP_S, max_points):
            cols[col].update(query_range(url, promql, lo, hi, STEP_S, timeout_s=timeout_s, get=get,
                                         dropped=dropped))
    times = sorted(set().union(*(c.keys() for c in cols.values())))
    if dropped is not None:
        dropped["negative"] += sum(v < 0 for c in cols.values() for v in c.values())
    return [Minute(t - STEP_S, *(max(0.0, cols[c].get(t, 0.0)) for c in _COUNTERS)) for t in times]


#: The scaler's measured cold start (scaler/phases.py): the p90 of the model's recent pods' cold starts.
COLD_START_P90 = "keda_llm_scaler_cold_start_p90_seconds"


def measured_cold_start_p90(url: str, model: str, end: float, span_s: float, *, namespace: str | None = None,
                            timeout_s: float = 60.0, get: Fetch = fetch) -> float | None:
    """The model's cold-start p90 as the scaler measured it last within [end - span, end] (the largest over
    scaler pods and namespaces matched), or None where Prometheus holds no such series."""
    promql = f"max(last_over_time({COLD_START_P90}{{{_selector(model, namespace)}}}[{max(60, int(span_s))}s]))"
    body = _get(url, "query", {"query": promql, "time": str(int(end))}, timeout_s, get)
    try:
        _, result = parse_query_response(body, promql)
    except SourceError as e:
        raise HistoryError(f"Prometheus at {url} gave no answer to {promql!r}: {e.message}") from None
    values = [result] if isinstance(result, float) else [v.value for v in result]
    good = [v for v in values if math.isfinite(v) and v > 0]
    return max(good) if good else None


def write_minutes_csv(minutes: list[Minute], path: str | Path, comment: str = "") -> None:
    """The per-minute CSV (`MINUTE_COLUMNS`; minutes as ISO 8601 UTC) that `load_minutes_csv` reads."""
    with Path(path).open("w", newline="") as fh:
        for line in comment.splitlines():
            fh.write(f"# {line}\n")
        w = csv.writer(fh)
        w.writerow(MINUTE_COLUMNS)
        for m in minutes:
            w.writerow([datetime.fromtimestamp(m.start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        f"{m.requests:.3f}", f"{m.prompt_tokens:.1f}", f"{m.output_tokens:.1f}"])


_DAYS = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([dw])\s*$")


def parse_span(text: str) -> float:
    """Seconds from `7d`, `2w` or a Go duration (`36h`, `90m`)."""
    m = _DAYS.match(text)
    if m:
        return float(m.group(1)) * (86400.0 if m.group(2) == "d" else 7 * 86400.0)
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise HistoryError(f"{text!r} is not a span (e.g. 7d, 36h, 90m): {e}") from None
    if not seconds > 0:
        raise HistoryError(f"{text!r}: the span must be > 0")
    return seconds


def parse_time(text: str) -> float:
    """Unix seconds from Unix seconds or an ISO 8601 date-time (UTC when it names no zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return iso_seconds(text)
    except ValueError:
        raise HistoryError(f"{text!r} is neither Unix seconds nor an ISO 8601 date-time") from None
