"""A small Prometheus HTTP API client: instant queries, strictly checked answers.

Anything but a well-formed `success` envelope of the expected type is a SourceError naming what
was wrong (down, slow, not JSON, status error, wrong resultType, NaN): the scaler must never take a
broken answer for "zero demand". API reference: https://prometheus.io/docs/prometheus/latest/querying/api/
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keda_llm.scaler.sources.errors import SourceError
from keda_llm.scaler.sources.http import fetch

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class VectorSample:
    """One element of an instant vector. `value` may be NaN/Inf: callers decide what that means."""

    labels: Mapping[str, str]
    value: float


def _number(raw: object, where: str) -> float:
    """A `[timestamp, "value"]` pair's value; Prometheus encodes values as strings ("NaN", "+Inf")."""
    if not (isinstance(raw, list) and len(raw) == 2 and isinstance(raw[1], str)):
        raise SourceError("not_json", f"{where}: value is not a [timestamp, \"number\"] pair: {str(raw)[:80]}")
    try:
        return float(raw[1])
    except ValueError:
        raise SourceError("not_json", f"{where}: value {raw[1][:40]!r} is not a number") from None


def _envelope_data(body: bytes, query: str) -> Any:
    """The `data` of a Prometheus API answer (query or query_range). Raises SourceError: not JSON, not an
    envelope, or Prometheus refused the query (its errorType and error in the message)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested deeper than Python parses
        raise SourceError("not_json", f"query {query!r}: answer is not JSON: {body[:80]!r}") from None
    if not isinstance(doc, dict) or "status" not in doc:
        raise SourceError("not_json", f"query {query!r}: answer is not a Prometheus API envelope: {body[:80]!r}")
    if doc["status"] != "success":
        raise SourceError(
            "api_error", f"query {query!r}: Prometheus said {doc.get('errorType', '?')}: {doc.get('error', '?')}"
        )
    if doc.get("isPartial") is True:  # VictoriaMetrics cluster, where deny_partial_response was not honoured
        raise SourceError("partial", f"query {query!r}: a partial answer (a storage node did not answer)")
    return doc.get("data")


def parse_query_response(body: bytes, query: str) -> tuple[str, list[VectorSample] | float]:
    """An /api/v1/query answer -> ("vector", samples) or ("scalar", value). Raises SourceError."""
    data = _envelope_data(body, query)
    if not isinstance(data, dict):
        raise SourceError("not_json", f"query {query!r}: no data object in the answer")
    rtype = data.get("resultType")
    result = data.get("result")
    if rtype == "scalar":
        return "scalar", _number(result, f"query {query!r}")
    if rtype != "vector":
        raise SourceError("result_type", f"query {query!r}: resultType {rtype!r}, expected vector or scalar")
    if not isinstance(result, list):
        raise SourceError("not_json", f"query {query!r}: vector result is not a list")
    samples = []
    for item in result:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            raise SourceError("not_json", f"query {query!r}: vector element without a metric object")
        samples.append(VectorSample(labels=metric, value=_number(item.get("value"), f"query {query!r}")))
    return "vector", samples


@dataclass(frozen=True)
class MatrixSeries:
    """One series of a range query's matrix: its labels and its (timestamp, value) points, in time order."""

    labels: Mapping[str, str]
    points: list[tuple[float, float]]


def parse_range_response(body: bytes, query: str) -> list[MatrixSeries]:
    """An /api/v1/query_range answer -> its series. Raises SourceError as `parse_query_response` does."""
    data = _envelope_data(body, query)
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        rtype = data.get("resultType") if isinstance(data, dict) else None
        raise SourceError("result_type", f"query {query!r}: resultType {rtype!r}, expected matrix")
    out = []
    for item in data["result"]:
        metric = item.get("metric") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not isinstance(values, list):
            raise SourceError("not_json", f"query {query!r}: matrix element without metric and values")
        points = []
        for raw in values:
            if not (isinstance(raw, list) and len(raw) == 2 and isinstance(raw[0], (int, float))):
                raise SourceError("not_json", f"query {query!r}: point is not [timestamp, \"number\"]: {str(raw)[:80]}")
            points.append((float(raw[0]), _number(raw, f"query {query!r}")))
        out.append(MatrixSeries(labels=metric, points=points))
    return out


#: Asked on every query: a partial answer (a store or storage node down) is an error, never data. Missing
#: replicas would read as fewer replicas, missing load as less load: a scale-down on a partial view.
#: Thanos's querier answers partially by default unless `partial_response=false` (thanos.io, Query
#: component, "Partial Response"); a VictoriaMetrics cluster's vmselect unless `deny_partial_response=1`
#: (docs.victoriametrics.com, cluster version, "Cluster availability"), and it marks one `isPartial`.
#: Prometheus ignores both (it never answers partially).
NO_PARTIAL = {"partial_response": "false", "deny_partial_response": "1"}


class PrometheusClient:
    """Instant queries against one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics)."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 5.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        base = address if "://" in address else f"http://{address}"
        self.url = base.rstrip("/") + "/api/v1/query"
        self.range_url = self.url + "_range"
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._headers = dict(headers or {})

    def query(self, promql: str, at: float | None = None) -> tuple[str, list[VectorSample] | float]:
        """Evaluate `promql` at `at` (Unix seconds; None: Prometheus' now). Prometheus' own 4xx/5xx JSON errors
        surface as api_error."""
        params = {"query": promql, **NO_PARTIAL} if at is None else {"query": promql, "time": f"{at:.3f}", **NO_PARTIAL}
        _, body = fetch(
            self.url, timeout_s=self._timeout_s, max_bytes=self._max_bytes,
            params=params, headers=self._headers, ok_statuses=(200, 400, 422, 503),
        )
        return parse_query_response(body, promql)

    def range_query(self, promql: str, start: float, end: float, step: float) -> list[MatrixSeries]:
        """Evaluate `promql` at start, start + step, ... <= end (/api/v1/query_range). Prometheus refuses more
        than 11,000 points per series in one query: callers chunk (scaler/backfill.py)."""
        _, body = fetch(
            self.range_url, timeout_s=self._timeout_s, max_bytes=self._max_bytes,
            params={"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}", **NO_PARTIAL},
            headers=self._headers, ok_statuses=(200, 400, 422, 503),
        )
        return parse_range_response(body, promql)

    def vector(self, promql: str, at: float | None = None) -> list[VectorSample]:
        rtype, result = self.query(promql, at)
        if not isinstance(result, list):
            raise SourceError("result_type", f"query {promql!r}: resultType {rtype!r}, expected vector")
        return result

    def demand(self, promql: str) -> float:
        """A demand number: a scalar, or a vector's sum (an empty vector is a real 0: no series, no demand).

        NaN, Inf or a negative value is an error, never a number the scaler acts on.
        """
        rtype, result = self.query(promql)
        values = [result] if isinstance(result, float) else [s.value for s in result]
        bad = [x for x in values if not math.isfinite(x) or x < 0]
        if bad:
            raise SourceError("invalid_value", f"query {promql!r}: {rtype} holds {bad[0]!r}, not a demand number")
        return float(sum(values))
