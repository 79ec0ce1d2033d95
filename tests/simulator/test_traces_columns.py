"""The CSV reader's two paths give the same numbers: numpy converts a chunk where every value is plainly
valid, the row-by-row reading (which names a bad value's line) does the rest. Fuzzed value by value, and a
whole file read in chunks of 7 rows and of 65,536."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from keda_llm.simulator.workload import traces
from keda_llm.simulator.workload.traces import TraceError, _fast_times, _fast_tokens, _time, _token, load_csv

TOKENS = ["12", "0", " 3 ", "+4", "1_0", "\uff11\uff12", "1310.0", "1310.5", "-1", "", "x", "9" * 25, "1e3", "0x10",
          "nan", "inf", str(traces.MAX_TOKENS), str(traces.MAX_TOKENS + 1), "7", "300", "0012", "\u0663", "1 2"]
NUMBERS = ["0", "1.5", " 2 ", "1e3", "1_000", "nan", "inf", "-1", "", "x", "1e200", "99999999999", "0.000001",
           "1700000000.123456", "1700000000123", "+5", "\uff15", "5.", ".5", "1e-320", "0x1p3"]
DATES = ["2023-11-16 18:17:03.9799600", "2023-11-16T18:17:03.97996", "2024-05-10 00:00:00", "2024-05-10",
         "2024-05-10T00:00:00Z", "2024-05-10 00:00:00.009930+00:00", " 2024-05-10 00:00:01", "2024-13-10 00:00:00",
         "2024-02-30 00:00:00", "2024-05-10 24:00:00", "2024-05-10 00:00:00.1234567891", "1970-01-01 00:00:00",
         "9999-12-31 23:59:59.999999999", "2024-05-10 00:00:00.000000001", "nope"]


def _slow_tokens(raw: list[str]) -> list[int] | None:
    try:
        return [_token(Path("f"), 1, "c", v) for v in raw]
    except TraceError:
        return None


def _slow_times(raw: list[str], unit: traces.TimeUnit) -> list[float] | None:
    try:
        return [_time(Path("f"), 1, "c", v, unit) for v in raw]
    except TraceError:
        return None


def test_fuzz_numpy_reads_exactly_what_the_row_by_row_reading_reads() -> None:
    rng = random.Random(20261130)
    fast_used = 0
    for _ in range(20_000):
        kind = rng.choice(["tokens", "s", "ms", "ns", "datetime"])
        pool = TOKENS if kind == "tokens" else DATES if kind == "datetime" else NUMBERS
        raw = [rng.choice(pool) for _ in range(rng.randrange(1, 6))]
        if kind == "tokens":
            fast, slow = _fast_tokens(raw), _slow_tokens(raw)
            if fast is not None:
                assert slow is not None and fast.tolist() == slow, raw
                fast_used += 1
        else:
            fast_t, slow_t = _fast_times(raw, kind), _slow_times(raw, kind)  # type: ignore[arg-type]
            if fast_t is not None:
                assert slow_t is not None and fast_t.tolist() == slow_t, (raw, kind)  # bit for bit
                fast_used += 1
    assert fast_used > 3000  # the fast path is taken, not only refused


def test_a_date_time_too_wide_for_numpy_goes_row_by_row() -> None:
    """numpy stores a chunk's strings at the widest one's width: one 100 KB field would make a chunk 26 GB."""
    wide = ["2024-05-10 00:00:00", "2024-05-10 00:00:01" + " " * 100_000]
    assert _fast_times(wide, "datetime") is None and _slow_times(wide, "datetime") == [1715299200.0, 1715299201.0]
    assert _fast_tokens(["1" + " " * 100]) is not None  # numbers never go through numpy's strings


def _write(path: Path, n: int, bad_at: int | None = None) -> None:
    rng = random.Random(n)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = 1_700_000_000_000_000  # microseconds
    for i in range(n):
        t += rng.randrange(0, 90_000)
        stamp = f"{np.datetime64(t, 'us')}".replace("T", " ") + "0"
        out = "oops" if i == bad_at else str(rng.randrange(1, 600))
        rows.append(f"{stamp},{rng.randrange(1, 9000)},{out}")
        if i % 97 == 0:
            rows.append("")  # blank rows are skipped, and still count as lines
    path.write_text("\n".join(rows) + "\n")


def test_a_file_reads_the_same_in_any_chunk_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "azure.csv"
    _write(f, 1000)
    whole = load_csv(f, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime")
    monkeypatch.setattr(traces, "CHUNK_ROWS", 7)
    chunked = load_csv(f, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime")
    assert np.array_equal(whole.arrival_s, chunked.arrival_s) and len(whole) == 1000
    assert np.array_equal(whole.prompt_tokens, chunked.prompt_tokens)
    assert np.array_equal(whole.output_tokens, chunked.output_tokens)


def test_a_bad_value_in_a_later_chunk_names_its_own_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "azure.csv"
    _write(f, 300, bad_at=250)
    line = next(i for i, text in enumerate(f.read_text().splitlines(), start=1) if text.endswith(",oops"))
    for chunk in (7, 1 << 16):
        monkeypatch.setattr(traces, "CHUNK_ROWS", chunk)
        with pytest.raises(TraceError, match=rf"line {line}, column GeneratedTokens: not a whole number"):
            load_csv(f, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime")


@pytest.mark.parametrize("chunk", [2, 4, 1 << 16])
def test_which_error_is_named_does_not_depend_on_the_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           chunk: int) -> None:
    """Found by a review: the first bad value in the file's order is the one named (as when each row was read
    alone), and the request limit is met at the row past it, whatever the chunk size."""
    monkeypatch.setattr(traces, "CHUNK_ROWS", chunk)
    monkeypatch.setattr(traces, "MAX_REQUESTS", 5)
    head = "timestamp,prompt_tokens,output_tokens\n"
    f = tmp_path / "t.csv"
    cases = [
        ("0,1,1\n1,1,1\n2,x,1\n3,1,1\n4,1,1\n5,1,1\n6,1,1\n", "line 4, column prompt_tokens: not a whole number"),
        ("0,1,1\n1,1,1\n2,1,1\n3,1,1\n4,1,1\n5,1,1\n6,1\n", "line 7: more than 5 requests"),
        ("0,1,1\n1,1,oops\n2,1,1\nlater,1,1\n", "line 3, column output_tokens"),  # before a later bad time
        ("0,1,1\n1,1,1\n2,1,x\n3,1\n", "line 4, column output_tokens"),  # before a short row after it
        ("0,1,1\n1,1,1\n2,1,1\n3,1,1\n4,1,1\n", None),  # exactly the limit: read
    ]
    for body, says in cases:
        f.write_text(head + body)
        if says is None:
            assert len(load_csv(f, "timestamp", "prompt_tokens", "output_tokens")) == 5
            continue
        with pytest.raises(TraceError, match=says):
            load_csv(f, "timestamp", "prompt_tokens", "output_tokens")


def test_an_error_names_the_files_own_line_past_comments_and_quoted_newlines(tmp_path: Path) -> None:
    """Line numbers once counted records: a comment inside the file or a quoted field with a newline moved every
    later line an error named."""
    f = tmp_path / "t.csv"
    f.write_text("# exported 2026-11-30\ntimestamp,prompt_tokens,output_tokens,note\n0,1,1,\"two\nlines\"\n"
                 "# a comment inside\n1,1,1,x\n2,bad,1,y\n")
    with pytest.raises(TraceError, match="line 7, column prompt_tokens"):
        load_csv(f, "timestamp", "prompt_tokens", "output_tokens")
    minutes = tmp_path / "m.csv"
    minutes.write_text("# from Prometheus\nminute,requests,prompt_tokens,output_tokens,note\n"
                       "0,1,10,2,\"a\nb\"\n60,x,10,2,c\n")
    with pytest.raises(TraceError, match="line 5, column requests"):  # its fifth line, the second minute
        traces.load_minutes_csv(minutes)


def test_blank_lines_before_the_header_are_skipped(tmp_path: Path) -> None:
    """As the layout detection skips them: a blank first line was taken for an empty header ("columns: ")."""
    f = tmp_path / "t.csv"
    f.write_text("\n\ntimestamp,prompt_tokens,output_tokens\n0,1,1\n1,x,1\n")
    with pytest.raises(TraceError, match="line 5, column prompt_tokens"):
        load_csv(f, "timestamp", "prompt_tokens", "output_tokens")
    f.write_text("\n\n")
    with pytest.raises(TraceError, match="empty file"):
        load_csv(f, "timestamp", "prompt_tokens", "output_tokens")


def test_an_error_in_a_record_spanning_lines_names_its_first_line(tmp_path: Path) -> None:
    """Found by a review: the line named was the record's last."""
    f = tmp_path / "t.csv"
    f.write_text('timestamp,prompt_tokens,output_tokens,note\n0,bad,1,"a\nb\nc"\n')
    with pytest.raises(TraceError, match="line 2, column prompt_tokens"):
        load_csv(f, "timestamp", "prompt_tokens", "output_tokens")
    m = tmp_path / "m.csv"
    m.write_text('minute,requests,prompt_tokens,output_tokens,note\n0,x,10,2,"a\nb"\n')
    with pytest.raises(TraceError, match="line 2, column requests"):
        traces.load_minutes_csv(m)
