"""`accepts_gzip`: the exporter's /metrics answers gzip only to a client that accepts it (RFC 9110 12.5.3)."""

from __future__ import annotations

import random

import pytest

from keda_llm.common.httpserver import accepts_gzip


@pytest.mark.parametrize(("header", "gzip"), [
    (None, False),
    ("", False),
    ("gzip", True),
    ("GZIP", True),
    ("x-gzip", True),
    ("gzip, deflate, br", True),
    ("deflate, gzip;q=0.5", True),
    ("gzip;q=1.0", True),
    ("gzip ; q=0.001", True),
    ("gzip;q=0", False),  # was read as a request for gzip: the substring test
    ("gzip;q=0.000", False),
    ("gzip;Q=0", False),
    ("*", True),
    ("*;q=0", False),
    ("gzip;q=0, *", False),  # named explicitly, the name decides over `*`
    ("*;q=0, gzip", True),
    ("identity", False),
    ("deflate, br", False),
    ("gzipped", False),  # another coding's name that contains "gzip"
    ("gzip;q=2", False),  # out of range: never turns compression on
    ("gzip;q=abc", False),
    ("gzip;q=nan", False),
    ("gzip;level=1", True),
])
def test_accepts_gzip(header: str | None, gzip: bool) -> None:
    assert accepts_gzip(header) is gzip


def test_accepts_gzip_never_raises_on_arbitrary_headers() -> None:
    rng = random.Random(7)
    alphabet = "gzipxdeflatbr*;=q,.0123456789 \t-_/\"'\\\x00\xff"
    for _ in range(20_000):
        header = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert accepts_gzip(header) in (True, False)
