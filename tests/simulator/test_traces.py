"""Trace loaders: columns, re-basing, gzip, errors that name file/line/column, rate and time options."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from keda_llm.simulator.workload.traces import (
    TraceError,
    load_azure_2023,
    load_azure_2024_minutes,
    load_burstgpt,
    load_csv,
    load_jsonl,
    load_mooncake,
)

CSV = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:17:03.5000000,100,10\n2023-11-16 18:17:04.2500000,200,20\n"
)


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    if name.endswith(".gz"):
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)
    return p


def test_csv_rebased_and_gz_transparent(tmp_path: Path) -> None:
    for name in ("t.csv", "t.csv.gz"):
        t = load_csv(write(tmp_path, name, CSV), "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime")
        assert t.arrival_s.tolist() == pytest.approx([0.0, 0.75])
        assert t.prompt_tokens.tolist() == [100, 200] and t.output_tokens.tolist() == [10, 20]


def test_missing_column_names_file_line_column(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "TIMESTAMP,Context,GeneratedTokens\n1,2,3\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 1: missing column 'ContextTokens'"):
        load_csv(p, "TIMESTAMP", "ContextTokens", "GeneratedTokens")


def test_unsorted_timestamps(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "ts,p,o\n5,1,1\n3,1,1\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 3, column ts: timestamps not sorted"):
        load_csv(p, "ts", "p", "o")
    assert load_csv(p, "ts", "p", "o", sort=True).arrival_s.tolist() == [0.0, 2.0]


def test_negative_timestamp(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", "ts,p,o\n1,1,1\n-2,1,1\n")
    with pytest.raises(TraceError, match=r"line 3, column ts: negative timestamp"):
        load_csv(p, "ts", "p", "o")


@pytest.mark.parametrize("bad", ["abc", "1.5", "-3"])
def test_non_numeric_tokens(tmp_path: Path, bad: str) -> None:
    p = write(tmp_path, "t.csv", f"ts,p,o\n1,1,1\n2,{bad},1\n")
    with pytest.raises(TraceError, match=r"t\.csv: line 3, column p: "):
        load_csv(p, "ts", "p", "o")


def test_jsonl_with_hashes(tmp_path: Path) -> None:
    rows = [{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp": 4000, "input_length": 700, "output_length": 6, "hash_ids": [1, 3]}]
    p = write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    t = load_jsonl(p, "timestamp", "input_length", "output_length", "ms", hash_key="hash_ids")
    assert t.arrival_s.tolist() == [0.0, 3.0]
    assert t.prefix_hashes(1) == (1, 3)
    w = t.window(1.0, 10.0)
    assert len(w) == 1 and w.arrival_s.tolist() == [2.0] and w.prefix_hashes(0) == (1, 3)


def test_jsonl_errors(tmp_path: Path) -> None:
    p = write(tmp_path, "m.jsonl", '{"timestamp": 1, "input_length": 2}\n')
    with pytest.raises(TraceError, match=r"m\.jsonl: line 1: missing field 'output_length'"):
        load_jsonl(p, "timestamp", "input_length", "output_length")
    p = write(tmp_path, "h.jsonl", '{"t": 1, "i": 2, "o": 3, "h": ["x"]}\n')
    with pytest.raises(TraceError, match=r"line 1, column h: not a list of integers"):
        load_jsonl(p, "t", "i", "o", hash_key="h")
    p = write(tmp_path, "n.jsonl", '{"t": 1, "i": "many", "o": 3}\n')
    with pytest.raises(TraceError, match=r"line 1, column i: not a whole number"):
        load_jsonl(p, "t", "i", "o")


def test_missing_file_and_empty(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_csv(tmp_path / "none.csv", "a", "b", "c")
    with pytest.raises(TraceError, match="no requests"):
        load_csv(write(tmp_path, "e.csv", "ts,p,o\n"), "ts", "p", "o")


def test_scale_rate_and_stretch(tmp_path: Path) -> None:
    body = "ts,p,o\n" + "".join(f"{i},{i + 1},1\n" for i in range(100))
    t = load_csv(write(tmp_path, "t.csv", body), "ts", "p", "o")
    double = t.scale_rate(2.0, seed=1)
    assert len(double) == 200 and np.all(np.diff(double.arrival_s) >= 0)
    assert sorted(double.prompt_tokens.tolist()) == sorted(list(range(1, 101)) * 2)
    half = t.scale_rate(0.5, seed=1)
    assert half.scale_rate(0.5, seed=1) is not half and 30 < len(half) < 70
    assert t.scale_rate(0.5, seed=1).prompt_tokens.tolist() == half.prompt_tokens.tolist()  # seeded
    assert t.stretch(2.0).arrival_s[-1] == 198.0
    with pytest.raises(TraceError, match="rate factor must be finite and > 0"):
        t.scale_rate(0)
    # bounds before anything is built: a trace past MAX_REQUESTS, a stretch past any plausible date
    for factor in (float("inf"), float("nan"), 1e7):
        with pytest.raises(TraceError, match=r"rate factor must be finite|is more than 100,000,000"):
            t.scale_rate(factor)
    for factor in (float("inf"), 1e300):
        with pytest.raises(TraceError, match=r"stretch factor must be finite|years"):
            t.stretch(factor)


MINUTES = (
    "# comment\nminute,code_requests,code_context_tokens,code_generated_tokens,"
    "conv_requests,conv_context_tokens,conv_generated_tokens\n0,3,300,30,1,10,1\n1,0,0,0,2,20,2\n2,5,500,50,1,10,1\n"
)


def test_azure_2024_minutes_arrivals_inside_each_minute(tmp_path: Path) -> None:
    p = write(tmp_path, "m.csv", MINUTES)
    t = load_azure_2024_minutes("code", seed=3, path=p, token_sigma=0.0)
    assert np.bincount((t.arrival_s // 60).astype(int), minlength=3).tolist() == [3, 0, 5]
    assert t.prompt_tokens.tolist() == [100] * 8 and t.output_tokens.tolist() == [10] * 8
    again = load_azure_2024_minutes("code", seed=3, path=p, token_sigma=0.0)
    assert again.arrival_s.tolist() == t.arrival_s.tolist()
    assert len(load_azure_2024_minutes("conv", path=p, start_minute=1, minutes=2)) == 3


def test_azure_2024_minutes_errors(tmp_path: Path) -> None:
    p = write(tmp_path, "m.csv", "minute,code_requests,code_context_tokens\n0,1,1\n")
    with pytest.raises(TraceError, match=r"line 1: missing column 'code_generated_tokens'"):
        load_azure_2024_minutes("code", path=p)
    with pytest.raises(TraceError, match="outside the file"):
        load_azure_2024_minutes("code", path=write(tmp_path, "n.csv", MINUTES), minutes=10)


def test_shipped_azure_2023() -> None:
    code, conv = load_azure_2023("code"), load_azure_2023("conv")
    assert (len(code), len(conv)) == (8819, 19366)  # PROVENANCE.md
    assert code.prompt_tokens[0] == 4808 and code.output_tokens[0] == 10  # first row of the CSV
    assert code.arrival_s[1] == pytest.approx(0.052)  # 18:17:04.0319600 - 18:17:03.9799600


def test_shipped_mooncake_hashes_and_spread() -> None:
    raw = load_mooncake(spread_s=None)
    assert len(raw) == 12031 and raw.prefix_hashes(0) == tuple(range(14))
    spread = load_mooncake(seed=1)
    assert len(spread) == 12031 and np.all(np.diff(spread.arrival_s) >= 0)


def test_shipped_azure_2024_first_hour() -> None:
    t = load_azure_2024_minutes("code", minutes=60, seed=0)
    assert len(t) > 50_000 and t.arrival_s[-1] < 3600
    assert np.bincount((t.arrival_s // 60).astype(int))[0] == 1537  # minute 0's code_requests


def test_shipped_burstgpt_week() -> None:
    t = load_burstgpt(seed=0)
    assert 15_000 < len(t) < 25_000 and t.arrival_s[-1] < 7 * 86400
    assert load_burstgpt(seed=0).arrival_s.tolist() == t.arrival_s.tolist()


@pytest.mark.parametrize(("text", "seconds"), [
    ("2026-11-24T10:00:00.173000Z", 1795514400.173), ("2026-11-24T10:00:00+01:00", 1795510800.0),
    ("2026-11-24 10:00:00.6805900", 1795514400.68059), ("2026-11-24T10:00:00-0530", 1795534200.0),
    ("2026-11-24T10:00", 1795514400.0), ("2026-11-24T10:00:00,5Z", 1795514400.5), ("2026-11-24", 1795478400.0),
])
def test_iso_date_times_with_fractions_and_zones(text: str, seconds: float) -> None:
    """Log formats as written: any fraction digits, Z or an offset; UTC where no zone is named, whatever the
    machine's local zone."""
    from keda_llm.common.times import iso_seconds

    assert iso_seconds(text) == pytest.approx(seconds, abs=1e-6)


def test_a_csv_of_iso_times_with_a_zone_loads(tmp_path: Path) -> None:
    p = tmp_path / "iso.csv"
    p.write_text("timestamp,prompt_tokens,output_tokens\n2026-11-24T10:00:00.173000Z,1310.0,19\n"
                 "2026-11-24T11:00:01.5+01:00,20,5\n")
    tr = load_csv(p, "timestamp", "prompt_tokens", "output_tokens", "datetime")
    assert tr.arrival_s.tolist() == pytest.approx([0.0, 1.327])
    assert tr.prompt_tokens.tolist() == [1310, 20]  # 1310.0: a whole number, as pandas writes one


def test_naive_date_times_read_the_same_in_every_local_zone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    p = tmp_path / "dst.csv"
    # the night the US leaves daylight time: three hours in UTC, four in New York's local time
    p.write_text("timestamp,prompt_tokens,output_tokens\n2026-11-01T04:00:00,1,1\n2026-11-01T07:00:00,1,1\n")
    spans = []
    for zone in ("UTC", "America/New_York"):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        spans.append(load_csv(p, "timestamp", "prompt_tokens", "output_tokens", "datetime").duration_s)
    monkeypatch.delenv("TZ")
    time.tzset()
    assert spans[0] == spans[1] == pytest.approx(3 * 3600)


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path: Path) -> None:
    """An unquoted comma shifts the columns after it: read as it stands, the row's numbers are misread."""
    p = tmp_path / "shifted.csv"
    p.write_text("timestamp,note,prompt_tokens,output_tokens\n0,ok,10,5\n1,a, b,20,7\n")
    with pytest.raises(TraceError, match="line 3: 5 fields, header has 4"):
        load_csv(p, "timestamp", "prompt_tokens", "output_tokens")


def test_epoch_nanoseconds_read_with_time_unit_ns(tmp_path: Path) -> None:
    """Loki and OpenTelemetry export nanoseconds; read as microseconds they are refused naming ns, not us again."""
    body = "ts,p,o\n1795514400173000000,10,5\n1795514401173000000,10,5\n"
    path = write(tmp_path, "ns.csv", body)
    assert load_csv(path, "ts", "p", "o", "ns").arrival_s.tolist() == [0.0, 1.0]
    with pytest.raises(TraceError, match=r"a finer unit \(--time-unit ns\)"):
        load_csv(path, "ts", "p", "o", "us")
    with pytest.raises(TraceError, match="not a time in any unit"):
        load_csv(write(tmp_path, "big.csv", "ts,p,o\n1e40,10,5\n"), "ts", "p", "o", "ns")
