"""Workload traces as compact columns: arrival time (s, from 0), prompt and output tokens, prefix hashes.

Loaders for the shipped public traces and for any CSV/JSONL with a timestamp and token columns.
Files ending in `.gz` are read transparently. Bad input raises `TraceError` naming the file, the
line and the column. Arrival processes that the data only implies (per-minute totals, quantised
timestamps, aggregates) are drawn with a seeded numpy Generator, so a run is reproducible.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Literal

import numpy as np
from numpy.typing import NDArray

from keda_llm.common.times import iso_seconds

DATA = Path(__file__).parent / "data"
TimeUnit = Literal["s", "ms", "us", "ns", "datetime"]
_UNIT_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}  # ns: Loki's and OpenTelemetry's exports


class TraceError(ValueError):
    """A trace file that cannot be used; the message names file, line and column."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival. `hash_offsets`/`hash_values` hold ragged prefix hashes (CSR), or are None.

    A window cut from a longer trace keeps the `lead_s` seconds of traffic before it as `lead` (its own
    trace, arrivals from 0 to `lead_s`): a backtest replays it first so the window starts the way a
    running deployment meets it, and scores only the window (simulator/cluster/lead_in.py). Other
    transformations drop it."""

    name: str
    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int32]
    output_tokens: NDArray[np.int32]
    hash_offsets: NDArray[np.int64] | None = None
    hash_values: NDArray[np.int64] | None = None
    lead: Trace | None = field(default=None, compare=False, repr=False)
    lead_s: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise TraceError(f"trace {self.name}: columns of different lengths")
        if (self.hash_offsets is None) != (self.hash_values is None):
            raise TraceError(f"trace {self.name}: hash_offsets and hash_values go together")
        if self.hash_offsets is not None and len(self.hash_offsets) != n + 1:
            raise TraceError(f"trace {self.name}: hash_offsets must have one entry per request plus one")
        if not (math.isfinite(self.lead_s) and self.lead_s >= 0) or (self.lead is None) != (self.lead_s == 0):
            raise TraceError(f"trace {self.name}: a lead-in needs its traffic and a finite length > 0 "
                             f"(lead_s {self.lead_s!r})")
        if self.lead is not None and len(self.lead) and not (
                self.lead.arrival_s[0] >= 0 and self.lead.arrival_s[-1] < self.lead_s):
            raise TraceError(f"trace {self.name}: the lead-in's arrivals must lie in [0, {self.lead_s:g}) s")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def prefix_hashes(self, i: int) -> tuple[int, ...]:
        if self.hash_offsets is None or self.hash_values is None:
            return ()
        return tuple(int(h) for h in self.hash_values[self.hash_offsets[i] : self.hash_offsets[i + 1]])

    def take(self, idx: NDArray[np.int64], name: str | None = None) -> Trace:
        """The requests at `idx` (in that order)."""
        offs = vals = None
        if self.hash_offsets is not None and self.hash_values is not None:
            lens = np.diff(self.hash_offsets)[idx]
            offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            starts = self.hash_offsets[idx]
            pos = np.repeat(starts - offs[:-1], lens) + np.arange(int(offs[-1]))
            vals = self.hash_values[pos]
        arr, pr, out = self.arrival_s[idx], self.prompt_tokens[idx], self.output_tokens[idx]
        return Trace(name or self.name, arr, pr, out, offs, vals)

    def window(self, start_s: float, end_s: float, lead_s: float = 0.0) -> Trace:
        """Requests arriving in [start_s, end_s), re-based so the window starts at 0; with `lead_s`, the
        traffic of the `lead_s` seconds before it (as much as the trace has) rides along as its lead-in."""
        if not (math.isfinite(lead_s) and lead_s >= 0):
            raise TraceError(f"trace {self.name}: lead-in must be finite and >= 0 seconds, got {lead_s!r}")
        lo, hi = np.searchsorted(self.arrival_s, [start_s, end_s], side="left")
        t = self.take(np.arange(lo, hi, dtype=np.int64), f"{self.name}[{start_s:g}s,{end_s:g}s)")
        lead, span = None, min(lead_s, max(0.0, start_s))
        if span > 0:
            first = int(np.searchsorted(self.arrival_s, start_s - span, side="left"))
            before = self.take(np.arange(first, lo, dtype=np.int64), f"{t.name} lead-in")
            lead = Trace(before.name, before.arrival_s - (start_s - span), before.prompt_tokens,
                         before.output_tokens, before.hash_offsets, before.hash_values)
        return Trace(t.name, t.arrival_s - start_s, t.prompt_tokens, t.output_tokens, t.hash_offsets, t.hash_values,
                     lead, span if lead is not None else 0.0)

    def wrapped(self, lead_s: float) -> Trace:
        """The trace with its own last `lead_s` seconds (at most all of it) as its lead-in: a whole trace has
        no traffic before it, so it is taken as one period of traffic that repeats, whose end is what came
        before its start (a week's Sunday night before its Monday, an hour's last minutes before its
        first). No lead-in for an empty trace or `lead_s` 0."""
        if not (math.isfinite(lead_s) and lead_s >= 0):
            raise TraceError(f"trace {self.name}: lead-in must be finite and >= 0 seconds, got {lead_s!r}")
        end = self.duration_s
        span = min(lead_s, end)
        if span <= 0:
            return Trace(self.name, self.arrival_s, self.prompt_tokens, self.output_tokens, self.hash_offsets,
                         self.hash_values)
        first = int(np.searchsorted(self.arrival_s, end - span, side="left"))
        tail = self.take(np.arange(first, len(self), dtype=np.int64), f"{self.name} lead-in (its end)")
        # the tail's arrivals fall in [end - span, end]: re-based to [0, span), the last one a hair early
        at = np.minimum(tail.arrival_s - (end - span), np.nextafter(span, 0.0))
        lead = Trace(tail.name, at, tail.prompt_tokens, tail.output_tokens, tail.hash_offsets, tail.hash_values)
        return Trace(self.name, self.arrival_s, self.prompt_tokens, self.output_tokens, self.hash_offsets,
                     self.hash_values, lead, span)

    def after_lead(self) -> Trace:
        """The lead-in and the window as one trace: the window's requests start at `lead_s` (no lead-in:
        the trace itself)."""
        if self.lead is None:
            return self
        lead, n0 = self.lead, len(self.lead)
        offs = vals = None
        if (lead.hash_offsets is None) != (self.hash_offsets is None):
            raise TraceError(f"trace {self.name}: the lead-in and the window disagree on prefix hashes")
        if lead.hash_offsets is not None and lead.hash_values is not None and self.hash_offsets is not None \
                and self.hash_values is not None:
            offs = np.concatenate([lead.hash_offsets, self.hash_offsets[1:] + lead.hash_offsets[-1]])
            vals = np.concatenate([lead.hash_values, self.hash_values])
        out = Trace(self.name, np.concatenate([lead.arrival_s, self.arrival_s + self.lead_s]),
                    np.concatenate([lead.prompt_tokens, self.prompt_tokens]),
                    np.concatenate([lead.output_tokens, self.output_tokens]), offs, vals)
        assert len(out) == n0 + len(self)
        return out

    def stretch(self, factor: float) -> Trace:
        """Time x `factor`: 2 makes the trace twice as long at half the rate."""
        if not (factor > 0 and math.isfinite(factor)):
            raise TraceError(f"trace {self.name}: stretch factor must be finite and > 0, got {factor}")
        if self.duration_s * factor > _LATEST_PLAUSIBLE_S:
            raise TraceError(f"trace {self.name}: stretched {factor:g} times it would last "
                             f"{self.duration_s * factor / 86400 / 365:,.0f} years")
        return Trace(f"{self.name}*t{factor:g}", self.arrival_s * factor, self.prompt_tokens, self.output_tokens,
                     self.hash_offsets, self.hash_values)

    def scale_rate(self, factor: float, seed: int = 0) -> Trace:
        """Rate x `factor` at the same time shape: thinning below 1, duplication above (seeded).

        Each request is kept floor(factor) times plus once more with probability frac(factor);
        copies after the first are placed uniformly between its arrival and the next one, so
        bursts keep their shape instead of stacking on one instant.
        """
        if not (factor > 0 and math.isfinite(factor)):
            raise TraceError(f"trace {self.name}: rate factor must be finite and > 0, got {factor}")
        if len(self) * factor > MAX_REQUESTS:
            raise TraceError(f"trace {self.name}: {len(self):,} requests x {factor:g} is more than {MAX_REQUESTS:,}")
        rng = np.random.default_rng(seed)
        n = len(self)
        copies = np.full(n, math.floor(factor), dtype=np.int64)
        copies += rng.random(n) < (factor - math.floor(factor))
        idx = np.repeat(np.arange(n, dtype=np.int64), copies)
        t = self.take(idx, f"{self.name}*r{factor:g}")
        first = np.ones(len(idx), dtype=bool)
        first[1:] = idx[1:] != idx[:-1]
        gap = np.diff(self.arrival_s, append=self.arrival_s[-1] if n else 0.0)[idx]
        arr = t.arrival_s + np.where(first, 0.0, rng.random(len(idx)) * gap)
        order = np.argsort(arr, kind="stable")
        t = t.take(order.astype(np.int64))
        return Trace(t.name, arr[order], t.prompt_tokens, t.output_tokens, t.hash_offsets, t.hash_values)

    def spread(self, quantum_s: float, seed: int = 0) -> Trace:
        """Arrivals logged on a `quantum_s` grid, spread uniformly inside their step (seeded) and re-sorted."""
        if not quantum_s > 0:
            raise TraceError(f"trace {self.name}: quantum must be > 0, got {quantum_s}")
        rng = np.random.default_rng(seed)
        arr = self.arrival_s + rng.random(len(self)) * quantum_s
        order = np.argsort(arr, kind="stable").astype(np.int64)
        t = self.take(order)
        return Trace(t.name, arr[order], t.prompt_tokens, t.output_tokens, t.hash_offsets, t.hash_values)


# -- reading ---------------------------------------------------------------------------------------

#: the most tokens one request's prompt or answer may name: past any model's context, and within the int32 the
#: simulator keeps them in
MAX_TOKENS = 100_000_000
#: prefix block hashes are kept as int64: unsigned 64-bit ones are read bit for bit
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
#: a per-minute history longer than this is a wrong unit or a typo, not traffic to tune on (and its zero-filled
#: minutes alone would take gigabytes)
MAX_HISTORY_DAYS = 400
#: the most requests one trace may synthesize or hold: 3.7x the Azure 2024 conversation week (27.3 M)
MAX_REQUESTS = 100_000_000
#: a timestamp in seconds past this (the year 5138) is a wrong unit, not a date
_LATEST_PLAUSIBLE_S = 1e11
@contextlib.contextmanager
def _open(path: Path) -> Iterator[IO[str]]:
    """The file as text (.gz read transparently). What reading it can raise besides a TraceError becomes one
    naming the file: unreadable, a corrupt .gz, not UTF-8, a CSV field past the csv module's limit."""
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: a directory, not a trace file")
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"  # by its bytes: `.GZ`, or a gzip file without the suffix
        # utf-8-sig: a byte-order mark (spreadsheet exports) is not part of the first line, even a `#` comment's
        if gzipped:
            with io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="") as fh:
                yield fh
        else:
            with path.open("r", encoding="utf-8-sig", newline="") as fh:
                yield fh
    except csv.Error as err:
        raise TraceError(f"{path}: not a CSV this reads: {err}") from None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
        raise TraceError(f"{path}: cannot read it: {err}") from None


def _whole(text: str) -> int:
    """A whole number written as one (`1310`) or as a float with no fraction (`1310.0`, as pandas writes an
    integer column that had a gap); ValueError otherwise."""
    try:
        return int(text)
    except ValueError:
        v = float(text)
        if not v.is_integer():
            raise
        return int(v)


def _token(path: Path, line: int, col: str, raw: object) -> int:
    try:
        if isinstance(raw, bool):
            raise ValueError
        v = int(raw) if isinstance(raw, int) else _whole(str(raw).strip())
    except (TypeError, ValueError, OverflowError):
        raise TraceError(f"{path}: line {line}, column {col}: not a whole number of tokens: {raw!r}") from None
    if v < 0:
        raise TraceError(f"{path}: line {line}, column {col}: negative token count {v}")
    if v > MAX_TOKENS:
        raise TraceError(f"{path}: line {line}, column {col}: {v} tokens in one request (at most {MAX_TOKENS:,})")
    return v


def _time(path: Path, line: int, col: str, raw: object, unit: TimeUnit) -> float:
    if unit == "datetime":
        try:
            return iso_seconds(str(raw))
        except ValueError:
            raise TraceError(f"{path}: line {line}, column {col}: not a date-time: {raw!r}") from None
    try:
        if isinstance(raw, bool):
            raise ValueError
        v = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(f"{path}: line {line}, column {col}: not a number: {raw!r}") from None
    except OverflowError:  # a JSON integer past any float
        raise TraceError(f"{path}: line {line}, column {col}: not a finite number: {str(raw)[:40]}...") from None
    if not math.isfinite(v):
        raise TraceError(f"{path}: line {line}, column {col}: not a finite number: {raw!r}")
    if v < 0:
        raise TraceError(f"{path}: line {line}, column {col}: negative timestamp {raw!r}")
    seconds = v * _UNIT_SCALE[unit]
    if seconds > _LATEST_PLAUSIBLE_S:
        finer = {"s": "ms", "ms": "us", "us": "ns"}.get(unit)
        raise TraceError(f"{path}: line {line}, column {col}: {raw!r} read as {unit} is after the year 5000: "
                         + (f"a finer unit (--time-unit {finer})?" if finer else "not a time in any unit"))
    return seconds


def _finish(name: str, path: Path, col: str, lines: Sequence[int] | NDArray[np.int64],
            times: Sequence[float] | NDArray[np.float64], prompts: Sequence[int] | NDArray[np.int32],
            outputs: Sequence[int] | NDArray[np.int32], hashes: list[list[int]] | None, sort: bool) -> Trace:
    if not len(times):
        raise TraceError(f"{path}: no requests")
    t = np.asarray(times, dtype=np.float64)
    back = np.flatnonzero(np.diff(t) < 0)
    order = np.arange(len(t), dtype=np.int64)
    if len(back):
        if not sort:
            i = int(back[0]) + 1
            raise TraceError(
                f"{path}: line {int(lines[i])}, column {col}: timestamps not sorted ({float(times[i])!r} after "
                f"{float(times[i - 1])!r}); "
                "sort them (--sort)"
            )
        order = np.argsort(t, kind="stable").astype(np.int64)
    t = t - t.min()
    offs = vals = None
    if hashes is not None:
        offs = np.concatenate([[0], np.cumsum([len(h) for h in hashes])]).astype(np.int64)
        vals = np.fromiter((x for h in hashes for x in h), dtype=np.int64, count=int(offs[-1]))
    tr = Trace(name, t, np.asarray(prompts, dtype=np.int32), np.asarray(outputs, dtype=np.int32), offs, vals)
    return tr.take(order) if len(back) else tr


def load_csv(path: str | Path, time_col: str, prompt_col: str, output_col: str, time_unit: TimeUnit = "s",
             name: str | None = None, sort: bool = False) -> Trace:
    """Any CSV with a header: one request per row. Timestamps are re-based to start at 0."""
    p = Path(path)
    with _open(p) as fh:
        at = [-1]  # the file's line a record starts on, past comments and quoted newlines (-1: none taken yet)
        reader = csv.reader(_numbered(fh, at))
        header = None
        for row in reader:  # blank lines before the header are skipped
            if row:
                header = row
                break
            at[0] = -1
        if header is None:
            raise TraceError(f"{p}: empty file")
        header = [h.strip().lstrip("\ufeff") for h in header]
        line0, at[0] = at[0], -1
        cols = []
        for c in (time_col, prompt_col, output_col):
            if c not in header:
                raise TraceError(f"{p}: line {line0}: missing column {c!r} (columns: {', '.join(header)})")
            cols.append(header.index(c))
        ti, pi, oi = cols
        acc = _Columns(p, time_col, prompt_col, output_col, time_unit)
        width = len(header)
        at_line, at_time, at_prompt, at_output = acc.lines.append, acc.raw[0].append, acc.raw[1].append, \
            acc.raw[2].append
        room = acc.room()
        for row in reader:  # the hot loop: bound appends, no call per row
            k, at[0] = at[0], -1
            if len(row) != width:
                if not row:
                    continue
                acc.flush()  # a bad value in an earlier row is the error, as when each row was read alone
                # more: an unquoted comma shifted the columns, and they would be misread
                raise TraceError(f"{p}: line {k}: {len(row)} fields, header has {width}")
            if len(acc.lines) == room:
                acc.flush()
                room = acc.room()
                if not room:
                    raise TraceError(f"{p}: line {k}: more than {MAX_REQUESTS:,} requests (cut the file)")
            at_line(k)
            at_time(row[ti])
            at_prompt(row[pi])
            at_output(row[oi])
        lines, times, prompts, outputs = acc.arrays()
    return _finish(name or p.name, p, time_col, lines, times, prompts, outputs, None, sort)


#: Rows converted at once: numpy reads a column of a chunk in one call; the strings of one chunk are all
#: that is held beside the arrays (a list per row once held 16.8 M rows in 2.6 GB).
CHUNK_ROWS = 1 << 16
#: A date-time numpy reads exactly as `iso_seconds` does: no zone, at most nanoseconds, no blanks around it.
_NAIVE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")


class _Columns:
    """A CSV's three columns, read a chunk at a time into arrays. A chunk is converted by numpy where every
    value is plainly valid, else row by row (`_time`, `_token`), which names the first bad value's line: the
    two paths give the same numbers (tests/simulator/test_traces_columns.py)."""

    def __init__(self, path: Path, time_col: str, prompt_col: str, output_col: str, unit: TimeUnit) -> None:
        self.path, self.cols, self.unit = path, (time_col, prompt_col, output_col), unit
        self.count = 0  # rows flushed into arrays
        #: the chunk being read: each row's line and its three values as text (the reader appends in place)
        self.lines: list[int] = []
        self.raw: tuple[list[str], list[str], list[str]] = ([], [], [])
        self._parts: list[tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int32], NDArray[np.int32]]] = []

    def arrays(self) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int32], NDArray[np.int32]]:
        self.flush()
        if not self._parts:
            return (np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int32), np.zeros(0, np.int32))
        out = tuple(np.concatenate(cols) for cols in zip(*self._parts, strict=True))
        self._parts = []
        return out  # type: ignore[return-value]

    def room(self) -> int:
        """Rows the next chunk may hold: a whole chunk, or what is left under MAX_REQUESTS (0: none)."""
        return min(CHUNK_ROWS, MAX_REQUESTS - self.count)

    def flush(self) -> None:
        """Convert the chunk read so far, and empty it in place (the reader holds its lists' appends)."""
        if not self.lines:
            return
        lines = np.asarray(self.lines, dtype=np.int64)
        t_raw, p_raw, o_raw = self.raw
        times = _fast_times(t_raw, self.unit)
        prompts, outputs = _fast_tokens(p_raw), _fast_tokens(o_raw)
        if times is None or prompts is None or outputs is None:
            # row by row, each row's time, prompt and output in turn: the first bad value in the file's order
            # is the one named, as when each row was read alone
            path, (tc, pc, oc), unit = self.path, self.cols, self.unit
            rows = [(_time(path, ln, tc, t, unit), _token(path, ln, pc, pr), _token(path, ln, oc, o))
                    for ln, t, pr, o in zip(self.lines, t_raw, p_raw, o_raw, strict=True)]
            times = np.array([r[0] for r in rows], dtype=np.float64)
            prompts = np.array([r[1] for r in rows], dtype=np.int32)
            outputs = np.array([r[2] for r in rows], dtype=np.int32)
        self._parts.append((lines, times.astype(np.float64), prompts, outputs))
        self.count += len(self.lines)
        self.lines.clear()
        for column in self.raw:
            column.clear()


#: The longest date-time numpy is handed: it stores a chunk's strings at their longest one's width, so one
#: 100 KB field would make a chunk 26 GB. Longer values (never a date-time) go row by row.
_FAST_WIDTH = 40


def _plain(raw: list[str]) -> bool:
    return not raw or max(map(len, raw)) <= _FAST_WIDTH


def _fast_tokens(raw: list[str]) -> NDArray[np.int32] | None:
    """Whole token counts by `int` straight into an array (as `_token` reads a plain count), or None where any
    value needs the row-by-row reading: `1310.0`, a negative or too large count, one that is not a number."""
    try:
        v = np.fromiter(map(int, raw), dtype=np.int64, count=len(raw))
    except (ValueError, OverflowError, TypeError):
        return None
    if len(v) and (int(v.min()) < 0 or int(v.max()) > MAX_TOKENS):
        return None
    return v.astype(np.int32)


def _fast_times(raw: list[str], unit: TimeUnit) -> NDArray[np.float64] | None:
    """Seconds by numpy, exactly as `_time` gives them, or None where any value needs the row-by-row reading
    (a zone, blanks, a non-finite or negative number, one past the year 5000, one that is not a time)."""
    if unit == "datetime":
        # nanoseconds in an int64 span 1678-2262; numpy wraps silently past them
        if not _plain(raw) or not all(_NAIVE.fullmatch(v) and "1678" < v[:4] < "2262" for v in raw):
            return None
        try:
            ns = np.asarray(raw).astype("datetime64[ns]").astype(np.int64)
        except (ValueError, OverflowError):
            return None
        # iso_seconds' sum, whole seconds then the fraction: the same float, bit for bit
        return (ns // 1_000_000_000).astype(np.float64) + (ns % 1_000_000_000) / 1e9
    try:
        v = np.fromiter(map(float, raw), dtype=np.float64, count=len(raw))
    except (ValueError, OverflowError, TypeError):
        return None
    if len(v) and not (np.isfinite(v).all() and v.min() >= 0):
        return None
    seconds = v * _UNIT_SCALE[unit]
    if len(seconds) and seconds.max() > _LATEST_PLAUSIBLE_S:
        return None
    return seconds


def _numbered(fh: IO[str], at: list[int]) -> Iterator[str]:
    """The file's lines but `#` comments. Where `at[0]` is -1 (the reader set it after a record), the line taken
    next is a record's first: its number goes there. So the line an error names is the record's own first line
    in the file, however many comments or quoted newlines came before or within it."""
    for n, text in enumerate(fh, start=1):
        if text.startswith("#"):
            continue
        if at[0] < 0:
            at[0] = n
        yield text


_MISSING = object()


def _field(obj: dict[str, object], key: str) -> object:
    """obj[key]; where there is no such key, the value at its dotted path (`usage.prompt_tokens`: the token
    counts of an OpenAI-compatible answer sit in its `usage` object); _MISSING where neither is there."""
    if key in obj:
        return obj[key]
    if "." not in key:
        return _MISSING
    value: object = obj
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def load_jsonl(path: str | Path, time_key: str, prompt_key: str, output_key: str, time_unit: TimeUnit = "s",
               hash_key: str | None = None, name: str | None = None, sort: bool = False) -> Trace:
    """Any JSON-lines file: one object per line; a key may be a dotted path into nested objects (`_field`)."""
    p = Path(path)
    lines: list[int] = []
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    hashes: list[list[int]] | None = [] if hash_key else None
    with _open(p) as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise TraceError(f"{p}: line {line}: not JSON: {e.msg}") from None
            except ValueError as e:  # an integer of more digits than Python converts (4,300)
                raise TraceError(f"{p}: line {line}: not a request: {e}") from None
            except RecursionError:
                raise TraceError(f"{p}: line {line}: not a request: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{p}: line {line}: not a JSON object")
            tv = obj[time_key] if time_key in obj else _field(obj, time_key)
            pv = obj[prompt_key] if prompt_key in obj else _field(obj, prompt_key)
            ov = obj[output_key] if output_key in obj else _field(obj, output_key)
            hv = _field(obj, hash_key) if hash_key else None
            if tv is _MISSING or pv is _MISSING or ov is _MISSING or hv is _MISSING:
                key = next(k for k, v in ((time_key, tv), (prompt_key, pv), (output_key, ov), (hash_key, hv))
                           if v is _MISSING)
                raise TraceError(f"{p}: line {line}: missing field {key!r}"
                                 + (" (the lines before have it)" if lines else ""))
            if len(lines) == MAX_REQUESTS:
                raise TraceError(f"{p}: line {line}: more than {MAX_REQUESTS:,} requests (cut the file)")
            lines.append(line)
            times.append(_time(p, line, time_key, tv, time_unit))
            prompts.append(_token(p, line, prompt_key, pv))
            outputs.append(_token(p, line, output_key, ov))
            if hashes is not None and hash_key:
                hs = hv
                if not isinstance(hs, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hs):
                    raise TraceError(f"{p}: line {line}, column {hash_key}: not a list of integers")
                if not all(_INT64_MIN <= h <= _UINT64_MAX for h in hs):
                    raise TraceError(f"{p}: line {line}, column {hash_key}: a hash past 64 bits")
                # unsigned 64-bit hashes (xxhash, ...) as the signed ones they are bit for bit: equal stays equal
                hashes.append([h - (1 << 64) if h > _INT64_MAX else h for h in hs])
    return _finish(name or p.name, p, time_key, lines, times, prompts, outputs, hashes, sort)


# -- public traces' own column names ---------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """The columns of a public trace as its publisher writes them, so a user's copy of the full trace (or
    one exported in the same shape) reads without naming its columns and its time unit."""

    name: str
    time: str
    prompt: str
    output: str
    unit: TimeUnit
    hashes: str | None = None

    def describe(self) -> str:
        unit = "date-time" if self.unit == "datetime" else self.unit
        return f"{self.name}'s columns: {self.time} ({unit}), {self.prompt}, {self.output}"


#: Checked in order; the first whose three columns a file has is used (only where the default names
#: are not all there and no column flag was given).
LAYOUTS = (
    # Azure LLM inference traces 2023 (Splitwise) and 2024 (DynamoLLM): TIMESTAMP as "2023-11-16 18:17:03.9799600"
    Layout("the Azure LLM inference trace", "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime"),
    # BurstGPT (BurstGPT_*.csv): Timestamp in seconds from the trace's start
    Layout("BurstGPT", "Timestamp", "Request tokens", "Response tokens", "s"),
    # Mooncake's traces (conversation, tool&agent, synthetic): timestamp in milliseconds, 512-token block hashes
    Layout("Mooncake", "timestamp", "input_length", "output_length", "ms", "hash_ids"),
    # a gateway's log of OpenAI-compatible answers: the `usage` object's names, Unix seconds
    Layout("OpenAI usage", "timestamp", "prompt_tokens", "completion_tokens", "s"),
    Layout("OpenAI usage", "created", "prompt_tokens", "completion_tokens", "s"),
    # the answers themselves, one chat.completion object per line: `usage` nested as the API returns it
    Layout("OpenAI usage", "created", "usage.prompt_tokens", "usage.completion_tokens", "s"),
    # the Batch API's output file: each answer under response.body
    Layout("the OpenAI Batch output", "response.body.created", "response.body.usage.prompt_tokens",
           "response.body.usage.completion_tokens", "s"),
    # LiteLLM proxy's spend logs exported from its database (LiteLLM_SpendLogs: startTime, prompt_tokens,
    # completion_tokens; github.com/BerriAI/litellm, schema.prisma)
    Layout("the LiteLLM spend log", "startTime", "prompt_tokens", "completion_tokens", "datetime"),
)

#: How deep file_fields names a JSON line's nested fields, at most how many names it lists of one line, and
#: how many lines it reads (a first line that is a failed call, with no `usage`, hides no layout).
_FIELD_DEPTH = 4
_MOST_FIELDS = 1000
_FIELD_LINES = 20


def file_fields(path: str | Path, jsonl: bool) -> list[str]:
    """A CSV's header names (after `#` comments), or the fields of a JSON-lines file's first _FIELD_LINES
    objects (keys, nested fields as dotted paths, and every layout's path that the object has); [] when there
    are none to read (the loader then says what is wrong)."""
    p = Path(path)
    names: dict[str, None] = {}
    seen = 0
    with _open(p) as fh:
        for text in fh:
            if text.startswith("#") or not text.strip():
                continue
            if not jsonl:
                return [h.strip().lstrip("\ufeff") for h in next(csv.reader([text]), [])]
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError):  # JSONDecodeError, or an integer past 4,300 digits
                break
            if not isinstance(obj, dict):
                break
            names.update(dict.fromkeys(_paths(obj)))
            names.update(dict.fromkeys(f for lay in LAYOUTS for f in (lay.time, lay.prompt, lay.output, lay.hashes)
                                       if f and _field(obj, f) is not _MISSING))  # past _MOST_FIELDS too
            seen += 1
            if seen == _FIELD_LINES:
                break
    return list(names)


def _paths(obj: dict[str, object]) -> list[str]:
    """`obj`'s keys, then its nested objects' fields as dotted paths (`usage.prompt_tokens`), breadth first,
    at most _FIELD_DEPTH deep and _MOST_FIELDS in all."""
    names: list[str] = []
    level: list[tuple[str, dict[str, object]]] = [("", obj)]
    for _ in range(_FIELD_DEPTH):
        deeper: list[tuple[str, dict[str, object]]] = []
        for prefix, o in level:
            for k, v in o.items():
                if len(names) == _MOST_FIELDS:
                    return names
                names.append(prefix + str(k))
                if isinstance(v, dict):
                    deeper.append((f"{prefix}{k}.", v))
        level = deeper
    return names


def ambiguous(fields: list[str], name: str) -> list[str]:
    """The fields that match `name` apart from case where it is not one of them and more than one does
    (`TIMESTAMP` and `Timestamp` for `timestamp`); [] otherwise."""
    if name in fields:
        return []
    same = [f for f in dict.fromkeys(fields) if f.casefold() == name.casefold()]
    return same if len(same) > 1 else []


def match_fields(fields: list[str], wanted: Sequence[str]) -> tuple[str, ...] | None:
    """Each of `wanted` as `fields` spell it: the same name, else the one field that differs from it only in
    case (`Timestamp` for `timestamp`); None where one is missing or two fields match it."""
    have = set(fields)
    folded: dict[str, list[str]] = {}
    for f in fields:
        folded.setdefault(f.casefold(), []).append(f)
    found = []
    for name in wanted:
        if name in have:
            found.append(name)
            continue
        same = folded.get(name.casefold(), [])
        if len(same) != 1:
            return None
        found.append(same[0])
    return tuple(found)


def detect_layout(fields: list[str]) -> Layout | None:
    """The first of LAYOUTS whose time, prompt and output columns are all among `fields`; else the first whose
    columns are there apart from case, with the names as the file spells them."""
    have = set(fields)
    exact = next((lay for lay in LAYOUTS if {lay.time, lay.prompt, lay.output} <= have), None)
    if exact is not None:
        return exact
    for lay in LAYOUTS:
        names = match_fields(fields, (lay.time, lay.prompt, lay.output))
        if names is not None:
            hashes = match_fields(fields, (lay.hashes,)) if lay.hashes else None
            return replace(lay, time=names[0], prompt=names[1], output=names[2],
                           hashes=hashes[0] if hashes else lay.hashes)
    return None


# -- the shipped traces ---------------------------------------------------------------------------

def _shipped(rel: str) -> Path:
    return DATA / rel


def load_azure_2023(service: Literal["code", "conv"] = "conv", path: str | Path | None = None) -> Trace:
    """Azure LLM inference trace 2023 (Splitwise): TIMESTAMP, ContextTokens, GeneratedTokens; about one hour."""
    if service not in ("code", "conv"):
        raise TraceError(f"azure 2023: service must be 'code' or 'conv', got {service!r}")
    p = Path(path) if path else _shipped(f"azure_llm_2023/AzureLLMInferenceTrace_{service}.csv.gz")
    return load_csv(p, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime", name=f"azure2023-{service}")


def load_mooncake(path: str | Path | None = None, spread_s: float | None = 3.0, seed: int = 0) -> Trace:
    """Mooncake FAST'25 conversation trace: timestamp (ms), input_length, output_length, hash_ids (512-token blocks).

    Its timestamps sit on a ~3 s grid (PROVENANCE.md); by default arrivals are spread uniformly inside
    each step (seeded). `spread_s=None` keeps the raw grid.
    """
    p = Path(path) if path else _shipped("mooncake_fast25/conversation_trace.jsonl.gz")
    t = load_jsonl(p, "timestamp", "input_length", "output_length", "ms", hash_key="hash_ids", name="mooncake-conv")
    return t.spread(spread_s, seed) if spread_s else t


def _lognormal_tokens(rng: np.random.Generator, means: NDArray[np.float64], sigma: float) -> NDArray[np.int32]:
    """Positive integer token counts with the given means (per element) and log-space spread `sigma`."""
    if sigma == 0:
        return np.maximum(1, np.rint(means)).astype(np.int32)
    mu = np.log(np.maximum(means, 1.0)) - sigma * sigma / 2
    drawn = np.rint(np.exp(mu + sigma * rng.standard_normal(len(means))))
    return np.clip(drawn, 1, MAX_TOKENS).astype(np.int32)  # a far tail of a huge mean stays a token count


def _arrivals_in_minutes(rng: np.random.Generator, counts: NDArray[np.int64]) -> NDArray[np.float64]:
    """`counts[m]` arrivals uniform inside minute m (a Poisson process conditioned on the count), sorted."""
    minute = np.repeat(np.arange(len(counts), dtype=np.float64) * 60.0, counts)
    arr = minute + rng.random(len(minute)) * 60.0
    arr.sort()  # uniform offsets never cross minute boundaries, so a global sort keeps minutes in order
    return arr


def load_azure_2024_minutes(service: Literal["code", "conv"] = "code", seed: int = 0, start_minute: int = 0,
                            minutes: int | None = None, token_sigma: float = 0.8,
                            path: str | Path | None = None) -> Trace:
    """Azure LLM trace 2024 from per-minute totals: each minute's request count arrives uniformly inside it.

    Token counts are drawn lognormal (log-space sigma `token_sigma`, 0 = every request at the mean)
    around the minute's mean (tokens / requests), so per-minute token totals match in expectation.
    Columns: minute, {service}_requests, {service}_context_tokens, {service}_generated_tokens.
    """
    if service not in ("code", "conv"):
        raise TraceError(f"azure 2024: service must be 'code' or 'conv', got {service!r}")
    p = Path(path) if path else _shipped("azure_llm_2024_perminute/azure2024-llm-minutes.csv.gz")
    cols = ["minute", f"{service}_requests", f"{service}_context_tokens", f"{service}_generated_tokens"]
    with _open(p) as fh:
        n_comments = 0
        text: list[str] = []
        for raw in fh:
            if raw.startswith("#") and not text:
                n_comments += 1
                continue
            text.append(raw)
    if not text:
        raise TraceError(f"{p}: no header")
    header = [h.strip() for h in text[0].split(",")]
    missing = [c for c in cols if c not in header]
    if missing:
        raise TraceError(f"{p}: line {n_comments + 1}: missing column {missing[0]!r} (columns: {', '.join(header)})")
    try:
        table = np.loadtxt(text[1:], delimiter=",", dtype=np.int64, ndmin=2)
    except ValueError as e:
        raise TraceError(f"{p}: not all values are whole numbers: {e}") from None
    if table.shape[1] != len(header):
        raise TraceError(f"{p}: rows have {table.shape[1]} fields, header has {len(header)}")
    idx = [header.index(c) for c in cols]
    mins, req, ctx, gen = (table[:, i] for i in idx)
    bad = np.flatnonzero((req < 0) | (ctx < 0) | (gen < 0))
    if len(bad):
        raise TraceError(f"{p}: line {n_comments + 2 + int(bad[0])}: negative value")
    if np.any(np.diff(mins) != 1):
        i = int(np.flatnonzero(np.diff(mins) != 1)[0]) + 1
        raise TraceError(f"{p}: line {n_comments + 2 + i}, column minute: minutes not consecutive")
    end = len(mins) if minutes is None else start_minute + minutes
    if not 0 <= start_minute < end <= len(mins):
        raise TraceError(f"{p}: minutes [{start_minute}, {end}) outside the file's 0..{len(mins)}")
    return synthesize_minutes(f"azure2024-{service}", req[start_minute:end], ctx[start_minute:end],
                              gen[start_minute:end], seed=seed, token_sigma=token_sigma)


def synthesize_minutes(name: str, requests: NDArray[np.int64], prompt_tokens: NDArray[np.float64] | NDArray[np.int64],
                       output_tokens: NDArray[np.float64] | NDArray[np.int64], *, seed: int = 0,
                       token_sigma: float = 0.8) -> Trace:
    """Requests from per-minute totals: minute m's `requests[m]` arrive uniformly inside it, each with
    lognormal prompt and output tokens (log-space sigma `token_sigma`, 0 = every request at the mean)
    around the minute's mean (tokens / requests), so per-minute token totals match in expectation.

    The one synthesis behind the Azure 2024 per-minute trace and users' own per-minute history
    (`load_minutes_csv`, `keda-llm tune --from-prometheus`).
    """
    req = np.asarray(requests, dtype=np.int64)
    rng = np.random.default_rng(seed)
    arrival = _arrivals_in_minutes(rng, req)
    safe = np.maximum(req, 1)
    prompt = _lognormal_tokens(rng, np.repeat(np.asarray(prompt_tokens) / safe, req).astype(np.float64), token_sigma)
    output = _lognormal_tokens(rng, np.repeat(np.asarray(output_tokens) / safe, req).astype(np.float64), token_sigma)
    return Trace(name, arrival, prompt, output)


#: The per-minute history format (`load_minutes_csv`), as `keda-llm tune --from-prometheus` writes it.
MINUTE_COLUMNS = ("minute", "requests", "prompt_tokens", "output_tokens")


def _nonneg(path: Path, line: int, col: str, raw: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise TraceError(f"{path}: line {line}, column {col}: not a number: {raw!r}") from None
    if not math.isfinite(v) or v < 0:
        raise TraceError(f"{path}: line {line}, column {col}: not a finite number >= 0: {raw!r}")
    return v


#: the columns that make a CSV a per-minute history (no request row has them): with one of the others missing
#: it is read as one, and the missing column named, not as request rows missing a `timestamp`
MINUTE_MARKERS = ("minute", "requests")


def is_minutes_csv(path: str | Path) -> bool:
    """Whether a CSV's header (after `#` comments) names MINUTE_MARKERS, case aside."""
    p = Path(path)
    with _open(p) as fh:
        for row in csv.reader(fh):
            if row and row[0].startswith("#"):
                continue
            return {c.casefold() for c in MINUTE_MARKERS} <= {h.strip().lstrip("\ufeff").casefold() for h in row}
    return False


def load_minutes_csv(path: str | Path, seed: int = 0, token_sigma: float = 0.8, name: str | None = None) -> Trace:
    """A per-minute history (columns MINUTE_COLUMNS: the minute as ISO 8601 or Unix seconds, then that minute's
    requests, prompt tokens and output tokens) synthesized into requests as the Azure 2024 trace is
    (`synthesize_minutes`). Minutes must rise on a 60 s grid; a minute missing from the file had no requests
    (Prometheus returns no point where no replica existed). Request counts may be fractional (a rate x 60):
    each minute gets the whole part plus one more with the fraction's probability (seeded).
    """
    p = Path(path)
    with _open(p) as fh:
        n_comments = 0
        rows: list[tuple[int, list[str]]] = []
        header: list[str] | None = None
        reader = csv.reader(fh)
        last = 0
        for row in reader:
            k, last = last + 1, reader.line_num  # the record's first line (a quoted newline spans more than one)
            if header is None and row and row[0].startswith("#"):
                n_comments += 1
                continue
            if header is None:
                header = [h.strip().lstrip("\ufeff") for h in row]
                continue
            if row:
                rows.append((k, row))
    if header is None:
        raise TraceError(f"{p}: empty file")
    spelled = match_fields(header, MINUTE_COLUMNS)  # `Minute`, `Requests`: the names case aside
    for c in MINUTE_COLUMNS if spelled is None else ():
        if two := ambiguous(header, c):
            raise TraceError(f"{p}: line {n_comments + 1}: columns {', '.join(repr(f) for f in two)} all match "
                             f"{c!r} apart from case (a per-minute history has one of each)")
    missing = [c for c in MINUTE_COLUMNS if match_fields(header, (c,)) is None]
    if missing or spelled is None:
        raise TraceError(f"{p}: line {n_comments + 1}: missing column {missing[0]!r} (columns: {', '.join(header)}; "
                         f"a per-minute history needs {', '.join(MINUTE_COLUMNS)})")
    if not rows:
        raise TraceError(f"{p}: no minutes")
    idx = [header.index(c) for c in spelled]
    times: list[float] = []
    values: list[tuple[float, float, float]] = []
    for line, row in rows:
        if len(row) < len(header):
            raise TraceError(f"{p}: line {line}: {len(row)} fields, header has {len(header)}")
        raw_t = row[idx[0]].strip()
        try:
            t = float(raw_t)
        except ValueError:
            t = _time(p, line, "minute", raw_t, "datetime")
        else:
            if not (math.isfinite(t) and 0 <= t <= _LATEST_PLAUSIBLE_S):
                raise TraceError(f"{p}: line {line}, column minute: {raw_t!r} is not Unix seconds (after the year "
                                 "5000, or negative): milliseconds? divide by 1000, or write ISO 8601")
        if times and t <= times[-1]:
            raise TraceError(f"{p}: line {line}, column minute: minutes not rising ({raw_t!r})")
        if times and (t - times[0]) % 60 != 0:
            raise TraceError(f"{p}: line {line}, column minute: {raw_t!r} is not a whole number of minutes after "
                             "the first")
        if times and t - times[0] > MAX_HISTORY_DAYS * 86400:
            raise TraceError(f"{p}: line {line}, column minute: {raw_t!r} is {(t - times[0]) / 86400:,.0f} days after "
                             f"the first minute: a history spans at most {MAX_HISTORY_DAYS} days")
        times.append(t)
        r, pt, ot = (_nonneg(p, line, c, row[i]) for c, i in zip(MINUTE_COLUMNS[1:], idx[1:], strict=True))
        for col, tokens in (("prompt_tokens", pt), ("output_tokens", ot)):
            if tokens / max(math.floor(r), 1) > MAX_TOKENS:
                raise TraceError(f"{p}: line {line}, column {col}: {tokens:g} tokens over {r:g} requests is more than "
                                 f"{MAX_TOKENS:,} a request")
        values.append((r, pt, ot))
    total = sum(v[0] for v in values)
    if total > MAX_REQUESTS:
        raise TraceError(f"{p}: {total:,.0f} requests in all: at most {MAX_REQUESTS:,} (a shorter span: --since)")
    slot = np.rint((np.asarray(times) - times[0]) / 60).astype(np.int64)
    req, prompt, output = (np.zeros(int(slot[-1]) + 1, dtype=np.float64) for _ in range(3))
    cols = np.asarray(values, dtype=np.float64)
    req[slot], prompt[slot], output[slot] = cols[:, 0], cols[:, 1], cols[:, 2]
    rng = np.random.default_rng([seed, 1])  # its own stream: the synthesis below draws as for Azure 2024
    counts = np.floor(req).astype(np.int64) + (rng.random(len(req)) < req - np.floor(req))
    if counts.sum() == 0:
        raise TraceError(f"{p}: no requests in any minute")
    if not (prompt.any() or output.any()):  # every request would be replayed as a one-token request
        raise TraceError(f"{p}: requests but no tokens in any minute (prompt_tokens and output_tokens all 0): a "
                         "pick tuned on requests that cost nothing says nothing")
    return synthesize_minutes(name or p.name, counts, prompt, output, seed=seed, token_sigma=token_sigma)


def load_burstgpt(seed: int = 0, output_fraction: float = 0.3, token_sigma: float = 0.8,
                  path: str | Path | None = None) -> Trace:
    """A week of arrivals from the BurstGPT aggregates (`week1_min`: token throughput per active minute).

    The json has no per-request rows, so requests are reconstructed: minute m gets a Poisson number
    of requests with mean tps_m x 60 / (mean tokens per request of its day, from `daily`), uniform
    inside the minute; minutes missing from `week1_min` had no requests. Each request's total tokens
    are lognormal around the day's mean, split `output_fraction` output (an assumption: the
    aggregates do not separate request and response tokens).
    """
    if not 0 < output_fraction < 1:
        raise TraceError(f"burstgpt: output_fraction must be in (0, 1), got {output_fraction}")
    p = Path(path) if path else _shipped("burstgpt_derived/burstgpt_analysis.json.gz")
    with _open(p) as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as e:
            raise TraceError(f"{p}: line {e.lineno}: not JSON: {e.msg}") from None
    for key in ("week1_min", "daily"):
        if key not in doc:
            raise TraceError(f"{p}: missing key {key!r}")
    days = {int(d["d"]): float(d["tok"]) / float(d["req"]) for d in doc["daily"] if d.get("req")}
    rows = doc["week1_min"]
    minute = np.array([int(r["t"]) for r in rows], dtype=np.int64)
    tps = np.array([float(r["tps"]) for r in rows], dtype=np.float64)
    if np.any(tps < 0) or np.any(minute < 0):
        raise TraceError(f"{p}: week1_min: negative minute or throughput")
    per_req = np.array([days.get(int(m // 1440), float(np.mean(list(days.values())))) for m in minute])
    rng = np.random.default_rng(seed)
    counts = np.zeros(int(minute.max()) + 1, dtype=np.int64)
    counts[minute] = rng.poisson(tps * 60.0 / per_req)
    arrival = _arrivals_in_minutes(rng, counts)
    mean_tokens = np.repeat(_per_minute(per_req, minute, len(counts)), counts)
    total = _lognormal_tokens(rng, mean_tokens, token_sigma).astype(np.int64)
    output = np.maximum(1, np.rint(total * output_fraction)).astype(np.int32)
    prompt = np.maximum(1, total - output).astype(np.int32)
    return Trace("burstgpt-week1", arrival, prompt, output)


def _per_minute(per_req: NDArray[np.float64], minute: NDArray[np.int64], n: int) -> NDArray[np.float64]:
    """Mean tokens per request for every minute 0..n-1 (0 where the minute had no row)."""
    out = np.zeros(n, dtype=np.float64)
    out[minute] = per_req
    return out


SHIPPED = ("azure2023-code", "azure2023-conv", "azure2024-code", "azure2024-conv", "mooncake-conv", "burstgpt-week1")


def load_shipped(name: str, seed: int = 0) -> Trace:
    """A shipped trace by name (see SHIPPED)."""
    if name == "azure2023-code":
        return load_azure_2023("code")
    if name == "azure2023-conv":
        return load_azure_2023("conv")
    if name == "azure2024-code":
        return load_azure_2024_minutes("code", seed=seed)
    if name == "azure2024-conv":
        return load_azure_2024_minutes("conv", seed=seed)
    if name == "mooncake-conv":
        return load_mooncake(seed=seed)
    if name == "burstgpt-week1":
        return load_burstgpt(seed=seed)
    raise TraceError(f"unknown trace {name!r}; shipped: {', '.join(SHIPPED)}")


def iter_requests(trace: Trace) -> Iterator[tuple[int, float, int, int, tuple[int, ...]]]:
    """(index, arrival, prompt, output, prefix hashes) per request, for building simulator requests."""
    has = trace.hash_offsets is not None
    for i in range(len(trace)):
        yield (i, float(trace.arrival_s[i]), int(trace.prompt_tokens[i]), int(trace.output_tokens[i]),
               trace.prefix_hashes(i) if has else ())
