"""Go `time.ParseDuration` strings (`90s`, `1h30m`, `500ms`) to seconds: the one duration grammar.

Kubernetes users write durations the Go way in every file they touch, so the exporter's config and
the ScaledObject metadata the scaler reads should accept the same spellings. Errors are plain
ValueErrors saying what is wrong; each caller wraps them with the key it was reading.
"""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
#: Go's largest duration, 2^63-1 ns (about 292 years): `time.ParseDuration` refuses anything longer.
MAX_SECONDS = (2**63 - 1) / 1e9
#: The shortest period a repeating loop (collection, probes, scans) is given. Shorter is no faster
#: signal, since engines update their gauges on their own iterations, but a loop that never sleeps: `1ns`
#: once turned a collector into a busy spin.
MIN_INTERVAL_SECONDS = 0.1


def parse_duration(text: str) -> float:
    """Seconds from Go duration syntax, or from a bare number of seconds. Surrounding blanks are ignored.

    The result is finite and at most Go's limit: a 400-digit duration is an error here, not an infinity
    that fails later in some int conversion."""
    seconds = _parse(text)
    if not seconds <= MAX_SECONDS:
        raise ValueError("duration out of range: at most 2562047h47m16.854775807s (Go's limit)")
    return seconds


def check_interval(seconds: float) -> float:
    """`seconds` if it is a usable loop period, else ValueError saying the floor."""
    if not seconds >= MIN_INTERVAL_SECONDS * (1 - 1e-9):  # 100000us sums to 0.09999999999999999
        raise ValueError(f"an interval must be at least {MIN_INTERVAL_SECONDS * 1000:g}ms: a shorter loop spins "
                         "without a fresher signal")
    return seconds


def _parse(text: str) -> float:
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    if _NUMBER.fullmatch(s):
        return float(s)
    if s.startswith("-"):
        raise ValueError("a duration cannot be negative")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError("not a duration: use Go syntax such as 90s, 10m, 1h30m, 500ms, or a number of seconds")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total
