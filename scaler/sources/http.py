"""One bounded HTTP GET: a whole-answer deadline and a maximum body size, errors as SourceError.

A socket timeout alone bounds each read, not the answer: a server that drips a byte a second
would hold a collection cycle forever. This checks the deadline between chunks as well.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import requests

from scaler.sources.errors import SourceError

CHUNK = 64 * 1024


def fetch(
    session: requests.Session,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    ok_statuses: tuple[int, ...] = (200,),
) -> tuple[int, bytes]:
    """GET `url`; return (status, body). Non-2xx answers are returned only if in `ok_statuses`."""
    deadline = time.monotonic() + timeout_s
    try:
        with session.get(url, params=params, headers=headers, timeout=timeout_s, stream=True) as resp:
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise SourceError("too_large", f"{url}: Content-Length {length} > {max_bytes} bytes")
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_content(CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise SourceError("too_large", f"{url}: body passed {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise SourceError("timeout", f"{url}: no full answer within {timeout_s:g}s")
                chunks.append(chunk)
            body = b"".join(chunks)
            if resp.status_code not in ok_statuses:
                raise SourceError("http_status", f"{url}: HTTP {resp.status_code}: {body[:200]!r}")
            return resp.status_code, body
    except SourceError:
        raise
    except (requests.Timeout, TimeoutError) as exc:
        raise SourceError("timeout", f"{url}: no answer within {timeout_s:g}s ({type(exc).__name__})") from exc
    except requests.RequestException as exc:
        raise SourceError("connection", f"{url}: {type(exc).__name__}: {exc}") from exc
