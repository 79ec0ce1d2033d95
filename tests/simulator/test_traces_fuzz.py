"""The trace readers take users' own files (`keda-llm tune --trace FILE`, `keda-llm simulate`): whatever the
bytes, they give a Trace or raise TraceError naming the file, never another exception (the CLI prints a
TraceError as one line; anything else was a traceback). Seeded fuzz of the three formats, plus the cases
it found: a non-UTF-8 file, a JSON line nested past Python's recursion limit, a CSV field past the csv
module's limit, a truncated .gz."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
from fuzzing import mutate_text as mutate

from keda_llm.simulator.workload.traces import Trace, TraceError, load_csv, load_jsonl, load_minutes_csv

CSV = "timestamp,prompt_tokens,output_tokens\n0.0,100,20\n0.5,2000,300\n1.25,17,1\n"
JSONL = ('{"timestamp": 0.0, "prompt_tokens": 100, "output_tokens": 20, "hash_ids": [1, 2]}\n'
         '{"timestamp": 1.5, "prompt_tokens": 10, "output_tokens": 2, "hash_ids": [3]}\n')
MINUTES = ("minute,requests,prompt_tokens,output_tokens\n2026-11-01T00:00:00Z,10,1000,200\n"
           "2026-11-01T00:01:00Z,12.5,1300,260\n")
def load(kind: int, path: Path) -> Trace:
    if kind == 0:
        return load_csv(path, "timestamp", "prompt_tokens", "output_tokens")
    if kind == 1:
        return load_jsonl(path, "timestamp", "prompt_tokens", "output_tokens", hash_key="hash_ids")
    return load_minutes_csv(path)


def test_any_bytes_give_a_trace_or_a_trace_error(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    outcomes = {"trace": 0, "error": 0}
    for n in range(6000):
        kind = n % 3
        text = mutate(rng, (CSV, JSONL, MINUTES)[kind])
        roll = rng.random()
        raw = (bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))) if roll < 0.05
               else text.encode("latin-1", "replace") if roll < 0.15 else text.encode("utf-8", "surrogatepass"))
        path = tmp_path / (f"t{n}.csv.gz" if rng.random() < 0.05 else f"t{n}")
        path.write_bytes(gzip.compress(raw)[: rng.randint(10, 200)] if path.suffix == ".gz" else raw)
        try:
            trace = load(kind, path)
        except TraceError as err:
            assert str(path) in str(err)
            outcomes["error"] += 1
        else:
            assert isinstance(trace, Trace) and len(trace.arrival_s) > 0
            outcomes["trace"] += 1
    assert outcomes["trace"] > 100 and outcomes["error"] > 3000  # the mutations reach both paths


@pytest.mark.parametrize(("kind", "raw", "says"), [
    (1, b'{"timestamp": ' + b"9" * 400 + b', "prompt_tokens": 1, "output_tokens": 1, "hash_ids": []}\n',
     "not a finite number"),
    (1, b'{"timestamp": 0, "prompt_tokens": ' + b"9" * 5000 + b', "output_tokens": 1}\n', "not a request"),
    (0, b"timestamp,prompt_tokens,output_tokens\n0,10,\xe9\n", "cannot read it: 'utf-8' codec"),
    (1, b"[" * 100_000 + b"\n", "line 1: not a request: JSON nested too deeply"),
    (0, b'timestamp,prompt_tokens,output_tokens\n"' + b"x" * 200_000 + b'",1,1\n', "field larger than field limit"),
    (2, b"minute,requests,prompt_tokens,output_tokens\n\"" + b"x" * 200_000 + b"\",1,1,1\n", "field larger"),
])
def test_what_the_fuzz_found_is_one_line_naming_the_file(tmp_path: Path, kind: int, raw: bytes, says: str) -> None:
    path = tmp_path / "trace"
    path.write_bytes(raw)
    with pytest.raises(TraceError, match=f"^{path}: .*") as err:
        load(kind, path)
    assert says in str(err.value)


@pytest.mark.parametrize(("row", "says"), [
    ("1793491320,1,1,1\n1829491320,1,1,1\n", "days after the first minute: a history spans at most 400 days"),
    ("1793491320,1e12,1,1\n", "requests in all: at most 100,000,000"),
    ("1793491320,1,1e30,1\n", "column prompt_tokens: 1e+30 tokens over 1 requests"),
    ("1793491320,0.4,1,1e10\n", "column output_tokens: 1e+10 tokens over 0.4 requests"),
])
def test_a_history_too_long_too_busy_or_too_wordy_is_refused_before_it_is_built(
        tmp_path: Path, row: str, says: str) -> None:
    """Each would have built gigabytes of arrays (or token counts past int32) before anything said so."""
    path = tmp_path / "minutes.csv"
    path.write_text("minute,requests,prompt_tokens,output_tokens\n" + row)
    with pytest.raises(TraceError, match="^" + str(path)) as err:
        load(2, path)
    assert says in str(err.value)


def test_unsigned_64_bit_prefix_hashes_are_read_bit_for_bit(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    big = (1 << 64) - 5
    path.write_text(f'{{"timestamp": 0, "prompt_tokens": 1, "output_tokens": 1, "hash_ids": [{big}, 7]}}\n'
                    f'{{"timestamp": 1, "prompt_tokens": 1, "output_tokens": 1, "hash_ids": [{big}]}}\n')
    trace = load(1, path)
    assert trace.hash_values is not None and trace.hash_values.tolist() == [-5, 7, -5]
    path.write_text(f'{{"timestamp": 0, "prompt_tokens": 1, "output_tokens": 1, "hash_ids": [{1 << 64}]}}\n')
    with pytest.raises(TraceError, match="a hash past 64 bits"):
        load(1, path)


def test_a_truncated_gz_is_a_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv.gz"
    whole = gzip.compress(CSV.encode() * 50)
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError, match="cannot read it: Compressed file ended"):
        load(0, path)
