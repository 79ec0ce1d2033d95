"""Why a metric source failed: one exception, one closed set of reason codes.

The reason is what `SourceStatus.errors` counts by, so operators see *which way* a source is
broken (down, slow, answering garbage) rather than a bare "error".
"""

from __future__ import annotations

from typing import Literal, get_args

SourceReason = Literal[
    "dns",  # the exporters' Service name did not resolve
    "connection",  # refused, reset, unreachable
    "timeout",  # no full answer within the deadline
    "http_status",  # a non-2xx answer
    "too_large",  # the body passed the maximum size
    "parse",  # not the Prometheus text format
    "not_json",  # Prometheus API: the body is not JSON / not the API's envelope
    "api_error",  # Prometheus API: status "error"
    "partial",  # Prometheus-compatible API: a partial answer (some of its stores did not answer)
    "result_type",  # Prometheus API: a result type the query cannot give (e.g. a matrix)
    "invalid_value",  # NaN / +-Inf / negative where a signal must be a number (counted, value dropped)
]
#: Every reason, read off `SourceReason` so the two never disagree (as exporter/errors.py does).
SOURCE_REASONS: tuple[SourceReason, ...] = get_args(SourceReason)


class SourceError(Exception):
    """A fetch, or the interpretation of what came back, failed; `reason` says which way."""

    def __init__(self, reason: SourceReason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: SourceReason = reason
        self.message = message
