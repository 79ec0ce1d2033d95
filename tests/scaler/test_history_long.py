"""The long tier (scaler/longhistory.py) through ModelHistory.minutes: encoding error, minute means, gaps,
wrap-around, merges of rebuilt minutes, and the per-pod snapshot file (scaler/snapshot.py)."""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from keda_llm.scaler import cli as scaler_cli
from keda_llm.scaler import snapshot
from keda_llm.scaler.assembly import ScalerSettings, Sources
from keda_llm.scaler.config import parse_metadata
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.longhistory import (
    CODE_MAX,
    HI,
    LO,
    MAX_RELATIVE_ERROR,
    LongTier,
    decode,
    encode,
    encode_one,
    pack,
    unpack,
)
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.restore import LongHistoryRestorer, StoreRef
from keda_llm.scaler.service import HistoryStore

DAY = 86_400.0
T0 = 1_800_000_000.0 - 1_800_000_000.0 % 60  # a minute boundary


def test_encoding_error_bound_is_the_stated_one_and_holds() -> None:
    # by hand: STEP = ln(1e8 / 1e-5) / 4093 = 29.9336 / 4093 = 0.0073134; exp(STEP / 2) - 1 = 0.0036634
    assert abs(MAX_RELATIVE_ERROR - 0.0036634) < 1e-7
    values = np.exp(np.random.default_rng(7).uniform(math.log(LO), math.log(HI), 200_000))
    codes = encode(values)
    assert codes.tolist()[:5000] == [encode_one(v) for v in values[:5000].tolist()]  # the scalar path agrees
    err = np.abs(decode(codes) - values) / values
    assert err.max() <= MAX_RELATIVE_ERROR * (1 + 1e-9)
    assert err.max() > 0.95 * MAX_RELATIVE_ERROR  # the bound is tight, not a loose promise
    # the edges: NaN stays NaN, 0 / below LO / negative read 0, above HI is clamped, HI and LO exact
    edges = [math.nan, 0.0, LO / 3, -5.0, 1e12, HI, LO]
    assert encode(edges).tolist() == [encode_one(v) for v in edges] == [0, 1, 1, 1, CODE_MAX, CODE_MAX, 2]
    got = decode(encode(edges))
    assert math.isnan(got[0])
    assert got[1:].tolist() == pytest.approx([0.0, 0.0, 0.0, HI, HI, LO], rel=1e-12)


def test_pack_unpack_round_trips_every_code() -> None:
    codes = np.arange(CODE_MAX + 1, dtype=np.uint16)
    four = np.stack([codes, codes[::-1], np.roll(codes, 7), np.roll(codes, 1000)], axis=-1)
    words = pack(four)
    assert words.shape == (CODE_MAX + 1, 3) and words.dtype == np.uint16  # 6 bytes a minute
    assert (unpack(words) == four).all()
    assert unpack(np.zeros((1, 3), np.uint16)).tolist() == [[0, 0, 0, 0]]  # a zeroed ring is all NaN


def replica(pod: str, t: float, running: float, waiting: float, finished: float) -> ReplicaSample:
    return ReplicaSample(pod, t, running=running, waiting=waiting, requests_finished_total=finished,
                         prompt_tokens_total=700 * finished, generation_tokens_total=180 * finished)


def test_minute_means_of_rates_and_demand_by_hand() -> None:
    h = ModelHistory("ns", "m")
    # one replica, observed every 15 s; in minute T0 it runs 2, 4, 6, 8 with 1 waiting and 3 upstream, and
    # finishes 1.5 requests/s (counter +22.5 per 15 s), each with 700 prompt and 180 generated tokens
    for i, t in enumerate(T0 - 15 + 15 * k for k in range(6)):
        running = 2.0 * i if i else 0.0
        h.ingest(Observation("ns", "m", t, (replica("a", t, running, 1.0, 22.5 * i),), upstream_demand=3.0))
    # `now` in minute T0: that minute is incomplete and not returned
    starts, demand = h.minutes("demand", T0 + 59, 120)
    assert starts.tolist() == [T0 - 120, T0 - 60] and math.isnan(demand[0])
    assert demand[1] == pytest.approx(0.0 + 1 + 3, rel=MAX_RELATIVE_ERROR)  # minute T0-60: one obs, 0 + 1 + 3
    # once `now` is past it, minute T0 reads the mean of its 4 observations: (2+4+6+8)/4 + 1 + 3 = 9
    _, demand = h.minutes("demand", T0 + 60, 60)
    assert demand.tolist() == pytest.approx([9.0], rel=MAX_RELATIVE_ERROR)
    _, finished = h.minutes("finished_rate", T0 + 60, 60)
    _, prompt = h.minutes("prompt_rate", T0 + 60, 60)
    _, generation = h.minutes("generation_rate", T0 + 60, 60)
    assert (finished[0], prompt[0], generation[0]) == pytest.approx((1.5, 1050.0, 270.0), rel=MAX_RELATIVE_ERROR)
    # the value returned is the value stored: reading again after the minute is written gives the same
    h.ingest(Observation("ns", "m", T0 + 61, (replica("a", T0 + 61, 1.0, 0.0, 200.0),)))
    assert h.minutes("demand", T0 + 61, 60)[1].tolist() == demand.tolist()


def test_gaps_are_nan_and_a_model_seen_without_replicas_is_zero() -> None:
    h = ModelHistory("ns", "m")
    h.ingest(Observation("ns", "m", T0, (replica("a", T0, 5.0, 0.0, 0.0),)))
    # minutes T0+60 .. T0+240: nothing collected (source down); minute T0+300: collected, no replica
    h.ingest(Observation("ns", "m", T0 + 300, ()))
    h.ingest(Observation("ns", "m", T0 + 365, (ReplicaSample("b", T0 + 365, up=False),)))  # down: not fresh
    starts, demand = h.minutes("demand", T0 + 420, 420)
    assert starts.tolist() == [T0 + 60 * k for k in range(7)]
    assert demand[0] == pytest.approx(5.0, rel=MAX_RELATIVE_ERROR)
    assert np.isnan(demand[1:5]).all()
    assert demand[5:].tolist() == [0.0, 0.0]
    _, finished = h.minutes("finished_rate", T0 + 420, 420)
    assert math.isnan(finished[0])  # one scrape: no rate yet
    assert finished[5:].tolist() == [0.0, 0.0]
    # a lookback that is not whole minutes rounds up; every minute is there, regular
    starts, values = h.minutes("demand", T0 + 420, 61)
    assert starts.tolist() == [T0 + 300, T0 + 360] and len(values) == 2
    with pytest.raises(ValueError, match="no long series 'running'"):
        h.minutes("running", T0, 60)
    with pytest.raises(ValueError, match="lookback must be > 0"):
        h.minutes("demand", T0, 0)


def test_fourteen_days_wrap_around_keeps_the_newest() -> None:
    tier = LongTier()  # 14 days
    assert tier.n == 20_160 and tier.nbytes() == 120_960
    first = int(T0 // 60)
    total = tier.n + 1440  # 15 days of minutes, one observation each: value = 1 + minute index
    for i in range(total):
        tier.add((first + i) * 60.0, (1.0 + i, 0.0, 0.0, 0.0))
    now = (first + total) * 60.0
    starts, got = tier.minutes("finished_rate", now, 15 * DAY)
    assert len(got) == total and starts[0] == first * 60.0
    assert np.isnan(got[:1440]).all()  # day 1 was overwritten by day 15
    expected = 1.0 + np.arange(1440, total)
    assert np.abs(got[1440:] / expected - 1).max() <= MAX_RELATIVE_ERROR
    # a jump of more than the span clears the ring: only the new minute remains
    tier.add(now + 20 * DAY, (5.0, 0.0, 0.0, 0.0))
    tier.add(now + 20 * DAY + 60, (6.0, 0.0, 0.0, 0.0))
    _, got = tier.minutes("finished_rate", now + 20 * DAY + 120, 14 * DAY)
    assert np.count_nonzero(~np.isnan(got)) == 2 and got[-1] == pytest.approx(6.0, rel=MAX_RELATIVE_ERROR)
    # a short gap clears only the skipped minutes (the ring is reused in place)
    tier.add(now + 20 * DAY + 300, (7.0, 0.0, 0.0, 0.0))
    _, got = tier.minutes("finished_rate", now + 20 * DAY + 360, 360)
    assert got[:2].tolist() == pytest.approx([5.0, 6.0], rel=MAX_RELATIVE_ERROR) and np.isnan(got[2:5]).all()
    assert got[5] == pytest.approx(7.0, rel=MAX_RELATIVE_ERROR)


def test_merge_fills_before_live_and_gaps_but_live_minutes_win() -> None:
    tier = LongTier(days=1)
    m0 = int(T0 // 60)
    for k in (10, 11, 13):  # live from minute m0+10 (seen in part), m0+12 missed, m0+14 being summed
        tier.add((m0 + k) * 60.0 + 30, (1.0, 1.0, 1.0, 1.0))
    tier.add((m0 + 14) * 60.0, (1.0, 1.0, 1.0, 1.0))
    minutes = np.arange(m0, m0 + 16)
    rebuilt = np.full((16, 4), 2.0)
    rebuilt[3] = math.nan
    landed = tier.merge(minutes, rebuilt)
    _, got = tier.minutes("demand", (m0 + 16) * 60.0, 16 * 60)
    # m0..m0+10 rebuilt (m0+10 was seen only in part) except m0+3 (NaN); m0+11, m0+13 live; m0+12 filled;
    # m0+14 is being summed: live; m0+15 is not before the live minute: not written
    expected = [2.0] * 11 + [1.0, 2.0, 1.0, 1.0, math.nan]
    expected[3] = math.nan
    assert got.tolist() == pytest.approx(expected, rel=MAX_RELATIVE_ERROR, nan_ok=True)
    assert landed == (10 + 1) * 4  # 10 minutes before live (m0+3 is NaN) and m0+12, four series each


def test_clock_step_back_forgets_the_future_minutes() -> None:
    h = ModelHistory("ns", "m")
    for k in range(10):
        t = T0 + 60 * k
        h.ingest(Observation("ns", "m", t, (replica("a", t, 4.0, 0.0, 0.0),)))
    h.ingest(Observation("ns", "m", T0 + 120, (replica("a", T0 + 120, 8.0, 0.0, 0.0),)))  # 7 min back
    h.ingest(Observation("ns", "m", T0 + 180, (replica("a", T0 + 180, 8.0, 0.0, 0.0),)))
    _, got = h.minutes("demand", T0 + 600, 600)
    assert got[:2].tolist() == pytest.approx([4.0, 4.0], rel=MAX_RELATIVE_ERROR)
    assert got[2:4].tolist() == pytest.approx([8.0, 8.0], rel=MAX_RELATIVE_ERROR)  # T0+180: summed, and complete
    assert np.isnan(got[4:]).all()  # the minutes from before the step, now in the future, are gone


def filled_tier(days: float = 1.0) -> LongTier:
    tier = LongTier(days=days)
    m0 = int(T0 // 60)
    for k in range(100):
        tier.add((m0 + k) * 60.0, (0.5 * k, 10.0 * k, 3.0, float(k % 7)))
    return tier


def test_snapshot_round_trip_is_exact(tmp_path: Path) -> None:
    tier = filled_tier()
    minutes, words = tier.export()
    entries = [snapshot.Entry("exporters-static|10.0.0.5:9400|", "llm", "m", int(minutes[-1]), words),
               snapshot.Entry("exporters-static|10.0.0.5:9400|", "llm", 'a "quoted"/model', int(minutes[-1]) - 5,
                              words[:50])]
    path = snapshot.save(tmp_path, entries)
    assert path.name == "long-history.v1.bin" and not [p for p in tmp_path.iterdir() if p != path]  # no temp left
    data = path.read_bytes()
    trailer = int.from_bytes(data[-8:-4], "little")
    assert len(data) == 16 + 4 + (1440 + 50) * 6 + trailer + 4 + 4  # magic, version, words, trailer, length, CRC
    back = snapshot.load(tmp_path)
    assert sorted(back) == sorted((e.source, e.namespace, e.model) for e in entries)
    got = back[("exporters-static|10.0.0.5:9400|", "llm", "m")]
    assert got.head == int(minutes[-1]) and (got.words == words).all() and (got.minutes == minutes).all()
    # read into a new tier: the same minute values, to the bit (the codes are stored, not the values)
    fresh = LongTier(days=1)
    fresh.merge(got.minutes, decode(unpack(got.words)))
    now = (int(T0 // 60) + 100) * 60.0
    for name in ("finished_rate", "prompt_rate", "generation_rate", "demand"):
        assert fresh.minutes(name, now, DAY)[1].tobytes() == tier.minutes(name, now, DAY)[1].tobytes()


def test_snapshot_is_bounded_first_come_first_kept(tmp_path: Path) -> None:
    words = np.zeros((1440, 3), np.uint16)
    # given most recently seen first (the restorer sorts them so): the first that fit are kept
    entries = [snapshot.Entry("s", "ns", f"m{i}", 1000 + i, words) for i in reversed(range(10))]
    snapshot.save(tmp_path, entries, max_bytes=30_000)  # 8,640 bytes of words a model: room for 3, not 4
    assert sorted(k[2] for k in snapshot.load(tmp_path)) == ["m7", "m8", "m9"]


@pytest.mark.parametrize(("damage", "why"), [
    (lambda b: b[:-100], "checksum mismatch"),
    (lambda b: b[:200] + bytes([b[200] ^ 0xFF]) + b[201:], "checksum mismatch"),
    (lambda b: b[:-8] + (1).to_bytes(4, "little") + b[-4:], "checksum mismatch"),
    (lambda b: b"PK\x03\x04 a zip, not ours" * 10, "bad magic"),
    (lambda b: b"", "bad magic"),
    (lambda b: b[:16] + (2).to_bytes(4, "little") + b[20:], "format version 2, this scaler reads 1"),
])
def test_corrupt_or_foreign_snapshot_is_a_log_line_and_an_empty_history(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object, why: str) -> None:
    minutes, words = filled_tier().export()
    path = snapshot.save(tmp_path, [snapshot.Entry("s", "ns", "m", int(minutes[-1]), words)])
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="keda_llm.scaler.snapshot"):
        assert snapshot.load(tmp_path) == {}
    (record,) = caplog.records
    assert f"long history snapshot {path} ignored: " in record.getMessage() and why in record.getMessage()
    assert "starting with an empty long history" in record.getMessage()


def test_no_snapshot_yet_is_silent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        assert snapshot.load(tmp_path / "never-written") == {}
    assert caplog.records == []


def test_history_flags_reach_the_settings_and_bad_days_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    args = parser.parse_args(["--history-dir", "/var/lib/keda-llm", "--history-days", "7"])
    settings = scaler_cli.settings_from_args(args)
    assert (settings.history_dir, settings.history_days) == ("/var/lib/keda-llm", 7.0)
    assert scaler_cli.settings_from_args(parser.parse_args([])).history_dir is None  # unset: nothing saved
    assert scaler_cli.settings_from_args(parser.parse_args([])).history_days == 14.0
    for bad, why in (("0", "must be in (0, 366] days"), ("a week", "not a number of days")):
        with pytest.raises(SystemExit):
            parser.parse_args(["--history-days", bad])
        assert f"argument --history-days: '{bad}': {why}" in capsys.readouterr().err


def test_an_unwritable_history_dir_is_a_log_line_not_a_crash(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    store = HistoryStore(long_days=1)
    store.ingest(Observation("ns", "m", T0, (replica("a", T0, 1.0, 0.0, 0.0),)))
    restorer = LongHistoryRestorer(lambda: [StoreRef("src", "", store)], store.lock, clock=lambda: T0,
                                   history_dir=blocker / "history")
    assert restorer.step() == 1  # nothing to read: restored as empty
    with caplog.at_level(logging.WARNING, logger="keda_llm.scaler.restore"):
        assert restorer.save() is None
    assert any(f"long history snapshot in {blocker / 'history'} not written: " in r.getMessage()
               for r in caplog.records)


def test_sources_hand_the_restorer_each_model_s_prometheus_and_activation_query() -> None:
    settings = ScalerSettings(exporters=("127.0.0.1:9400",), prometheus_address="http://prometheus:9090")
    sources = Sources(settings, background=False)
    try:
        query = 'sum(gateway_pending_requests{model="m"})'
        sources.watch("ns", parse_metadata({"model": "m", "activationQuery": query}))
        sources.watch("ns", parse_metadata({"model": "n"}))
        (ref,) = sources._long_stores()
        assert (ref.name, ref.prometheus) == ("exporters-static|127.0.0.1:9400|http://prometheus:9090",
                                              "http://prometheus:9090")
        assert (ref.upstream("ns", "m"), ref.upstream("ns", "n"), ref.upstream("other", "m")) == (query, None, None)
    finally:
        sources.stop()
