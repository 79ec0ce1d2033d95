"""What the exporter's and the scaler's small HTTP servers share beyond TLS (common/tls.py).

Both are `http.server` thread-per-connection servers with keep-alive: each open connection holds a thread
until the client closes it. Without a bound on silence, a client that connects and never sends (or a
leaked kept-alive connection) held its thread for ever.
"""

from __future__ import annotations

#: A connection silent this long (idle between requests, or stalled mid-request) is closed. Longer than any
#: usual scrape interval, so a kept-alive scraper's connection is not cut between two scrapes.
IDLE_TIMEOUT_S = 120.0


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an `Accept-Encoding` value lets the answer be gzip (RFC 9110 section 12.5.3): `gzip` (or its
    alias `x-gzip`) with a q above 0, else `*` with a q above 0. `gzip;q=0` refuses it: a substring test
    read that as a request for gzip."""
    if not accept_encoding:
        return False
    named: bool | None = None
    star = False
    for item in accept_encoding.split(","):
        coding, _, params = item.partition(";")
        coding = coding.strip().lower()
        if coding not in ("gzip", "x-gzip", "*"):
            continue
        ok = _q(params) > 0
        if coding == "*":
            star = ok
        else:
            named = ok if named is None else named or ok
    return named if named is not None else star


def _q(params: str) -> float:
    """The q of one coding's parameters (1 when absent; 0 when unreadable or out of range, so a bad value
    never turns compression on)."""
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0
