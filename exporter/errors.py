"""Why a scrape failed: one exception, one reason code per kind of failure.

The reason is the `reason` label of `llm_exporter_scrape_errors_total`, so the set is closed.
"""

from __future__ import annotations

from typing import Literal, get_args

Reason = Literal[
    "timeout",  # the engine accepted but did not answer in time
    "connection",  # refused, reset, DNS
    "http_status",  # a non-2xx answer
    "too_large",  # the body passed the maximum size
    "parse",  # not the Prometheus text format / OpenMetrics
    "duplicate",  # the same series twice in one body
    "invalid_value",  # NaN or +-Inf where a signal must be a number
    "unknown_engine",  # no adapter recognizes the body (and none is forced)
]
#: Every reason, read off `Reason` so the two never disagree; declaration order is the exposition's.
REASONS: tuple[Reason, ...] = get_args(Reason)


class ScrapeError(Exception):
    """A scrape or its interpretation failed; `reason` says which way."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: Reason = reason
