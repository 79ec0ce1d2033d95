"""ISO 8601 / RFC 3339 date-times to Unix seconds: the one reading the exporter (pod start times), the scaler
(cold-start phases) and the simulator (traces, `--until`) share."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_ISO = re.compile(r"(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?)(?:[.,](\d+))?\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?")


def iso_seconds(text: str) -> float:
    """Unix seconds of an ISO 8601 date-time, read the same in every local time zone: any number of fraction
    digits, `Z` or a `+hh:mm` offset, UTC when it names no zone. ValueError when it is not one."""
    m = _ISO.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not an ISO 8601 date-time: {text!r}")
    base, frac, zone = m.groups()
    tz = UTC
    if zone and zone not in "Zz":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)))
    dt = datetime.fromisoformat(base.replace(" ", "T")).replace(tzinfo=tz)
    return dt.timestamp() + (float("0." + frac) if frac else 0.0)
