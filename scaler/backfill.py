"""Rebuild a model's long tier (scaler/longhistory.py) from Prometheus: the history every scaler pod shares.

A scaler pod that starts (or sees a model for the first time) has no long history of its own; the
Prometheus that scrapes the exporters has it. This asks for each minute bucket what the live feed
would have put there, with range queries at step 60 s over the exporter's `llm_*` series
(common/vocabulary.py), so every pod rebuilds the same minutes from the same Prometheus:

- minute m is evaluated at (m + 1) x 60 s - 1 ms over a 60 s range: exactly the samples stamped in
  [m x 60 s, (m + 1) x 60 s), under Prometheus 2's closed and 3's left-open range selectors alike;
- rates: `rate(counter[60s])` per pod, summed (the live feed sums the pods' counter rates);
  demand: `avg_over_time(running[60s]) + avg_over_time(waiting[60s])` per pod, summed;
- per pod `max by (namespace, exported_namespace, model, pod, exported_pod)`, as the `prometheus`
  source reads (scaler/sources/prometheus.py): a second scrape job of the same exporter is not counted
  twice;
- a minute where Prometheus scraped an exporter (its `llm_exporter_targets`, there with no engine on
  the node too, or any `llm_engine_up`) but holds none of this model's engines up is 0, as the live feed
  records a model with no fresh replica; a minute where it scraped no exporter at all is NaN;
- Prometheus refuses more than 11,000 points per series in one query ("exceeded maximum resolution
  of 11,000 points per timeseries", prometheus/prometheus web/api/v1/api.go), so 14 days (20,160
  minutes) go in chunks of 7 days (10,080 points).

The upstream term of demand (the ScaledObject's `activationQuery`, which the live feed sums once a
collection) is rebuilt as the mean of a 10 s subquery of it at 10, 20, .. 50 s past the minute, summed:
`sum(avg_over_time((q)[59s:10s]))`, or `avg_over_time(vector(q)[59s:10s])` where q is a scalar (59 s: a
point on the minute itself would read the previous minute's last sample); a query Prometheus refuses
both ways is left out of the rebuild (logged). Live minutes win over rebuilt ones (LongTier.merge).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from keda_llm.common import vocabulary as v
from keda_llm.scaler.longhistory import LF, MINUTE, NLF
from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.prometheus import GROUP_BY, replica_key
from keda_llm.scaler.sources.promql import MatrixSeries, PrometheusClient

log = logging.getLogger(__name__)

#: Prometheus' limit of points per series in one range query (web/api/v1/api.go).
MAX_POINTS = 11_000
#: Minutes per range query: 7 days, under MAX_POINTS.
CHUNK_MINUTES = 10_080
#: An exporter scraped in the minute (any node, any model): Prometheus was collecting.
COLLECTED = f'count(count_over_time({{__name__=~"{v.EXPORTER_TARGETS}|{v.ENGINE_UP}"}}[60s]))'


def queries(model: str) -> dict[str, str]:
    """Series name -> the PromQL giving it per pod for minute buckets (see the module docstring)."""
    sel = f"{{model={json.dumps(model)}}}"

    def per_pod(expr: str) -> str:
        return f"max by ({GROUP_BY}) ({expr})"

    return {
        "up": per_pod(f"max_over_time({v.ENGINE_UP}{sel}[60s])"),
        "finished_rate": per_pod(f"rate(llm_requests_finished_total{sel}[60s])"),
        "prompt_rate": per_pod(f"rate(llm_prompt_tokens_total{sel}[60s])"),
        "generation_rate": per_pod(f"rate(llm_generation_tokens_total{sel}[60s])"),
        "running": per_pod(f"avg_over_time(llm_requests_running{sel}[60s])"),
        "waiting": per_pod(f"avg_over_time(llm_requests_waiting{sel}[60s])"),
    }


def upstream_queries(activation_query: str) -> tuple[str, str]:
    """The minute mean of an activationQuery, as a vector query (summed as the live feed sums it) and as a
    scalar one."""
    q = activation_query
    return f"sum(avg_over_time(({q})[59s:10s]))", f"avg_over_time(vector({q})[59s:10s])"


def eval_time(minute: int) -> float:
    """When minute `minute`'s bucket is evaluated: 1 ms before its end."""
    return (minute + 1) * MINUTE - 0.001


def minute_of(ts: float) -> int:
    return round((ts + 0.001) / MINUTE) - 1


def _sum_by_minute(series: list[MatrixSeries], namespace: str | None, first: int, k: int,
                   positive: bool = False) -> npt.NDArray[np.float64]:
    """Per-minute sum over the series (of `namespace`'s pods when given); NaN where none had a value.
    `positive`: count 1 per pod whose value is > 0 instead (engines up)."""
    out = np.full(k, math.nan)
    for s in series:
        if namespace is not None:
            key = replica_key(s.labels)
            if key is None or key[0] != namespace:
                continue
        for ts, value in s.points:
            i = minute_of(ts) - first
            if not 0 <= i < k or not math.isfinite(value) or value < 0:
                continue
            add = (1.0 if value > 0 else 0.0) if positive else value
            out[i] = add if math.isnan(out[i]) else out[i] + add
    return out


def rebuild(client: PrometheusClient, namespace: str, model: str, first: int, last: int,
            upstream: str | None = None) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Minutes first..last (absolute minute numbers) of the model's long series from Prometheus:
    (minutes, values (k, 4) in LONG_FIELDS order, NaN = none). `upstream`: the activationQuery whose minute
    means join demand. Raises SourceError when a query fails (an upstream query Prometheus refuses is
    logged and left out instead)."""
    if last < first:
        return np.empty(0, dtype=np.int64), np.empty((0, NLF))
    qs = queries(model)
    minutes = np.arange(first, last + 1, dtype=np.int64)
    k = len(minutes)
    got: dict[str, npt.NDArray[np.float64]] = {name: np.full(k, math.nan) for name in (*qs, "collected")}
    forms = list(upstream_queries(upstream)) if upstream else []
    if forms:
        got["upstream"] = np.full(k, math.nan)
    for lo in range(first, last + 1, CHUNK_MINUTES):
        hi = min(last, lo + CHUNK_MINUTES - 1)
        start, end = eval_time(lo), eval_time(hi)
        sl = slice(lo - first, hi - first + 1)
        for name, promql in qs.items():
            series = client.range_query(promql, start, end, MINUTE)
            got[name][sl] = _sum_by_minute(series, namespace, lo, hi - lo + 1, positive=name == "up")
        got["collected"][sl] = _sum_by_minute(client.range_query(COLLECTED, start, end, MINUTE), None, lo, hi - lo + 1)
        while forms:
            try:
                series = client.range_query(forms[0], start, end, MINUTE)
            except SourceError as err:
                if not _refused_as_invalid(err):  # a timeout or an unavailable store: the whole rebuild retries
                    raise
                forms.pop(0)  # the other form (a scalar query), else none
                if not forms:
                    log.warning("long history of %s/%s: activationQuery %r left out of the rebuild: %s",
                                namespace, model, upstream, err)
                continue
            got["upstream"][sl] = _sum_by_minute(series, None, lo, hi - lo + 1)
            break
    return minutes, combine(got)


def _refused_as_invalid(err: SourceError) -> bool:
    """Prometheus refused the query itself (`bad_data`: a scalar activationQuery in the vector form, or the
    other way round), the one refusal the other form can answer. Its timeout (503 `timeout`), `execution` and a
    store's `unavailable` are transient: taken for a refusal, they left the upstream term out of all 14 days
    for good. (The errorType is in the message promql.py writes: "Prometheus said <errorType>: ...".)"""
    return err.reason == "api_error" and "Prometheus said bad_data:" in err.message


def combine(got: Mapping[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
    """The per-minute sums -> the long tier's values: a minute with the model up takes its series (NaN where
    not reported); collected without it is 0; not collected is NaN."""
    up = got["up"]
    k = len(up)
    present = ~np.isnan(up) & (np.nan_to_num(up) > 0)
    absent = ~present & (np.nan_to_num(got["collected"]) > 0)
    values = np.full((k, NLF), math.nan)
    for name in ("finished_rate", "prompt_rate", "generation_rate"):
        values[present, LF[name]] = got[name][present]
    running, waiting = got["running"][present], got["waiting"][present]
    both = np.where(np.isnan(running), 0.0, running) + np.where(np.isnan(waiting), 0.0, waiting)
    values[present, LF["demand"]] = np.where(np.isnan(running) & np.isnan(waiting), math.nan, both)
    values[absent] = 0.0
    upstream = got.get("upstream")
    if upstream is not None:  # joins every minute that was collected (none seen: 0, as the live feed reads it)
        known = ~np.isnan(values[:, LF["demand"]])
        values[known, LF["demand"]] += np.nan_to_num(upstream[known])
    return values
