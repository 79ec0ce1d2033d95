"""How far an exporter's clock is from this pod's, from the `Date` header of its answer.

Replicas carry `llm_engine_last_success_timestamp_seconds` on the exporter's node clock, and the policy
judges them fresh against the scaler's. A node whose clock runs a minute behind made every replica on it
read as a minute old: past `staleAfter`, the model held (UNAVAILABLE) for as long as the clock was off;
a node ahead kept a dead exporter's last answer fresh for as long. The `Date` header (RFC 9110 section
6.6.1, whole seconds, sent by the exporter's HTTP server with every answer) tells the offset to within
about a second plus the round trip, so only offsets well past that are corrected: with synced clocks
nothing changes.
"""

from __future__ import annotations

import math
from email.utils import parsedate_to_datetime

#: Offsets at or under this are left alone: the estimate's own error is up to half a second of the
#: header's resolution plus half the round trip (bounded by the scrape timeout).
TOLERANCE_S = 2.0


def date_seconds(header: str | None) -> float | None:
    """The `Date` header as Unix seconds; None when absent or not an HTTP date."""
    if not header:
        return None
    try:
        parsed = parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:  # RFC 9110 dates are GMT; a zone-less one is not an HTTP date
        return None
    return parsed.timestamp()


def clock_offset(header: str | None, sent_at: float, received_at: float) -> float:
    """The exporter's clock minus ours, estimated from its `Date` header and our wall clock around the
    request (`sent_at` before it, `received_at` once the headers were in); 0 when the header is missing
    or bad, or the offset is within what the estimate can tell (TOLERANCE_S plus half the round trip)."""
    date = date_seconds(header)
    if date is None or not (math.isfinite(sent_at) and math.isfinite(received_at)) or received_at < sent_at:
        return 0.0
    # the server stamped a whole second: its clock read [date, date + 1) at a moment in [sent_at, received_at]
    offset = date + 0.5 - (sent_at + received_at) / 2
    return offset if abs(offset) > TOLERANCE_S + (received_at - sent_at) / 2 else 0.0
