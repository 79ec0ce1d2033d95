"""What the exporter's and the scaler's small HTTP servers share beyond TLS (common/tls.py).

Both are `http.server` thread-per-connection servers with keep-alive: each open connection holds a thread
until the client closes it. Without a bound on silence, a client that connects and never sends (or a
leaked kept-alive connection) held its thread for ever.
"""

from __future__ import annotations

#: A connection silent this long (idle between requests, or stalled mid-request) is closed. Longer than any
#: usual scrape interval, so a kept-alive scraper's connection is not cut between two scrapes.
IDLE_TIMEOUT_S = 120.0
