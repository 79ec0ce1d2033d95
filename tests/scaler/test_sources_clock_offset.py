"""An exporter on a node whose clock is off: its replicas' timestamps are corrected by the offset its
`Date` header shows (scaler/sources/clocks.py), so they are judged fresh or stale as they really are.

Without it a node a minute behind made every replica on it a minute old, past `staleAfter`: the model
held (UNAVAILABLE) for as long as the clock stayed off."""

from __future__ import annotations

import http.server
import random
import threading
from collections.abc import Iterator
from email.utils import formatdate

import pytest
from sources_bodies import MODEL, NOW, pod_a

from keda_llm.scaler.history import is_fresh
from keda_llm.scaler.model import ReplicaSample
from keda_llm.scaler.sources.clocks import TOLERANCE_S, clock_offset, date_seconds
from keda_llm.scaler.sources.exporters import ExportersSource, static_targets

WALL = 1_790_000_000.0  # this pod's real clock, fixed (whole seconds)


class SkewedExporter:
    """An exporter whose node clock is `skew` seconds from WALL: its `Date` header says so."""

    def __init__(self, body: str, skew: float, date: str | None = "") -> None:
        stamp = formatdate(WALL + skew, usegmt=True) if date == "" else date

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = body.encode()
                self.send_response_only(200)
                if stamp is not None:
                    self.send_header("Date", stamp)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporters() -> Iterator[list[SkewedExporter]]:
    made: list[SkewedExporter] = []
    yield made
    for e in made:
        e.close()


def collect(exporter: SkewedExporter) -> tuple[float, float]:
    """The replica's timestamp as the source publishes it (scaler clock NOW), and the answer's offset."""
    src = ExportersSource(static_targets([exporter.url]), clock=lambda: NOW, wall=lambda: WALL, timeout_s=2.0)
    try:
        (obs,) = src.collect_once()
        (replica,) = obs.replicas
        assert obs.model == MODEL
        return replica.timestamp, src._answers[exporter.url].parsed.clock_offset
    finally:
        src.stop()


@pytest.mark.parametrize("skew", [-60.0, -600.0, 45.0, 3600.0])
def test_a_skewed_node_clock_is_corrected_out_of_its_replicas_timestamps(
        exporters: list[SkewedExporter], skew: float) -> None:
    # the engine was scraped 1 s ago, stamped on the node's clock
    exporters.append(exporter := SkewedExporter(pod_a(ts=NOW - 1 + skew), skew))
    timestamp, offset = collect(exporter)
    assert offset == pytest.approx(skew + 0.5)  # whole-second Date: the middle of its second
    assert timestamp == pytest.approx(NOW - 1.5)
    # uncorrected, -60 s read 61 s old (stale), and +3600 s fresh for an hour after the node stopped
    assert is_fresh(_sample(timestamp), NOW, stale_after=30.0)


def test_a_node_that_stopped_is_stale_even_when_its_clock_is_ahead(exporters: list[SkewedExporter]) -> None:
    """A node 10 minutes ahead whose engine last answered 2 minutes ago is stale, not 8 minutes in the future."""
    exporters.append(exporter := SkewedExporter(pod_a(ts=NOW - 120 + 600), 600.0))
    timestamp, _ = collect(exporter)
    assert not is_fresh(_sample(timestamp), NOW, stale_after=30.0)
    assert timestamp == pytest.approx(NOW - 120.5)


@pytest.mark.parametrize(("skew", "date"), [(0.0, ""), (1.0, ""), (-2.0, ""), (0.0, None), (0.0, "yesterday"),
                                            (0.0, "Mon, 30 Nov 2026 14:43:45")])
def test_synced_clocks_and_a_missing_or_bad_date_change_nothing(
        exporters: list[SkewedExporter], skew: float, date: str | None) -> None:
    exporters.append(exporter := SkewedExporter(pod_a(ts=NOW - 1), skew, date))
    timestamp, offset = collect(exporter)
    assert (timestamp, offset) == (NOW - 1, 0.0)


def test_the_offset_estimate() -> None:
    date = formatdate(WALL - 60, usegmt=True)
    assert clock_offset(date, WALL, WALL) == pytest.approx(-59.5)
    assert clock_offset(date, WALL - 0.2, WALL + 0.2) == pytest.approx(-59.5)
    # within the tolerance, widened by half the round trip: left alone
    assert clock_offset(formatdate(WALL + 2, usegmt=True), WALL, WALL) == pytest.approx(2.5)
    assert clock_offset(formatdate(WALL + 1, usegmt=True), WALL, WALL) == 0.0
    assert clock_offset(formatdate(WALL + 3, usegmt=True), WALL - 1.5, WALL + 1.5) == 0.0
    for bad_times in ((WALL, WALL - 1), (float("nan"), WALL), (WALL, float("inf"))):
        assert clock_offset(date, *bad_times) == 0.0
    assert TOLERANCE_S == 2.0


def test_date_headers_are_parsed_or_refused_never_raised() -> None:
    """Seeded fuzz: any header text gives a float or None."""
    rng = random.Random(7)
    good = formatdate(WALL, usegmt=True)
    alphabet = good + "0123456789:,+- GMTUTCxyz\t\x00é"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.5:  # mutate a good one
            chars = list(good)
            for _ in range(rng.randint(1, 3)):
                chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            text = "".join(chars)
        got = date_seconds(text)
        assert got is None or isinstance(got, float)
        offset = clock_offset(text, WALL, WALL + rng.random())
        assert isinstance(offset, float)
    assert date_seconds(good) == WALL
    assert date_seconds(None) is None and date_seconds("") is None


def _sample(timestamp: float) -> ReplicaSample:
    return ReplicaSample(pod="p", timestamp=timestamp, up=True, running=1.0)
