"""The scaler's bounded HTTP GET: keda_llm.common.httpget's, its errors as SourceError naming the URL.

The deadline covers the whole answer, headers and body, however slowly a server drips it; a
refused status's body is not read beyond a short prefix (see common/httpget.py). Bodies come
gzipped where the server offers it (the exporter does): a 1,000-model exporter body is megabytes of
text crossing the cluster every interval, a tenth of that compressed; `max_bytes` bounds both sizes.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Container, Mapping

from keda_llm.common.httpget import FetchError
from keda_llm.common.httpget import fetch as get
from keda_llm.scaler.sources.errors import SourceError

USER_AGENT = "keda-llm-scaler"


def fetch(
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    ok_statuses: Container[int] = (200,),
    tls: ssl.SSLContext | None = None,
    on_headers: Callable[[Callable[[str], str | None]], None] | None = None,
) -> tuple[int, bytes]:
    """GET `url`; return (status, body). Other statuses than `ok_statuses` are SourceError("http_status").
    `tls`: the context for an https URL (default: the system's CAs)."""
    try:
        return get(url, timeout=timeout_s, max_bytes=max_bytes, params=params, accept_gzip=True,
                   headers={"User-Agent": USER_AGENT, **(headers or {})}, ok_statuses=ok_statuses, tls=tls,
                   on_headers=on_headers)
    except FetchError as exc:
        raise SourceError(exc.reason, f"{url}: {exc.message}") from exc
