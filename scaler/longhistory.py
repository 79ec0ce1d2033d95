"""The long tier of a model's history: days of per-minute means, 6 bytes a minute, for the forecaster.

Seasonal forecasting (daily and weekly seasons) needs days of history per model at minute resolution;
the short tiers of scaler/history.py keep 75 minutes. This tier keeps `days` (default 14) of 60 s
buckets of four series, each the mean over the minute of what the model's aggregate row said:

- `finished_rate`, `prompt_rate`, `generation_rate`: requests finished, prompt and generated tokens
  per second (summed over the fresh replicas, from their counters);
- `demand`: running + waiting + upstream requests (the gauge sum the policies scale on).

A minute where collection saw the model with no fresh replica holds 0 (it was observed: nothing
ran, nothing finished); a minute without any observation holds NaN.

Encoding, chosen for the budget of 150 MB for 1,000 models x 14 days (20.2 M model-minutes: at most
7.4 bytes a minute): each value becomes a 12-bit log-quantized code and the four codes of a minute
are packed into 48 bits (three uint16), 6 bytes a minute, 121 KB a model for 14 days. Codes: 0 =
NaN (so a zeroed ring is an empty one), 1 = zero (any value below `LO`), 2..4095 = `LO` x
exp((code - 2) x STEP) up to `HI`. Within [LO, HI] the worst relative error is exp(STEP / 2) - 1 =
0.366% (`MAX_RELATIVE_ERROR`); below LO the absolute error is under LO (1e-5: one request in 28
hours); above HI (1e8 tokens/s) values are clamped to HI. float16 (2 bytes a value) would give 8
bytes a minute, 161 MB: over the budget.

Cost: `add` is O(1) per observation (a few float additions; the minute is encoded once, when the
next one starts). Nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

LONG_FIELDS = ("finished_rate", "prompt_rate", "generation_rate", "demand")
LF = {name: i for i, name in enumerate(LONG_FIELDS)}
NLF = len(LONG_FIELDS)

MINUTE = 60.0
DEFAULT_DAYS = 14.0
LO = 1e-5  # the smallest non-zero value kept (below: stored as 0)
HI = 1e8  # the largest (above: clamped)
CODE_NAN = 0
CODE_ZERO = 1
CODE_MIN = 2
CODE_MAX = 4095  # 12 bits
STEP = math.log(HI / LO) / (CODE_MAX - CODE_MIN)
#: Worst |decoded - value| / value for LO <= value <= HI (rounding to the nearest code in log space).
MAX_RELATIVE_ERROR = math.exp(STEP / 2) - 1


def encode(values: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """Values -> 12-bit codes (see the module docstring); NaN -> 0, <= LO or negative -> 1 (zero)."""
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, CODE_NAN, dtype=np.uint16)
    present = ~np.isnan(v)
    small = present & (v < LO)
    big = present & ~small
    out[small] = CODE_ZERO
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = CODE_MIN + np.rint(np.log(np.minimum(v[big], HI) / LO) / STEP)
    out[big] = np.clip(codes, CODE_MIN, CODE_MAX).astype(np.uint16)
    return out


def encode_one(v: float) -> int:
    """`encode` of one value, in plain Python (a minute's four values are encoded this way: numpy's per-call
    overhead would cost more than the arithmetic)."""
    if v != v:
        return CODE_NAN
    if v < LO:
        return CODE_ZERO
    return min(CODE_MAX, CODE_MIN + round(math.log(min(v, HI) / LO) / STEP))


_TABLE = np.concatenate(([math.nan, 0.0], LO * np.exp(np.arange(CODE_MAX - CODE_MIN + 1) * STEP)))


def decode(codes: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """12-bit codes -> values (a table lookup)."""
    return _TABLE[np.asarray(codes, dtype=np.intp)]


def pack(codes: npt.NDArray[np.uint16]) -> npt.NDArray[np.uint16]:
    """(..., 4) codes -> (..., 3) uint16 words: the four 12-bit codes as one 48-bit number."""
    c = codes.astype(np.uint64)
    v = c[..., 0] | (c[..., 1] << np.uint64(12)) | (c[..., 2] << np.uint64(24)) | (c[..., 3] << np.uint64(36))
    mask = np.uint64(0xFFFF)
    return np.stack([v & mask, (v >> np.uint64(16)) & mask, (v >> np.uint64(32)) & mask], axis=-1).astype(np.uint16)


def unpack(words: npt.NDArray[np.uint16]) -> npt.NDArray[np.uint16]:
    """(..., 3) words -> (..., 4) codes: the inverse of `pack`."""
    w = words.astype(np.uint64)
    v = w[..., 0] | (w[..., 1] << np.uint64(16)) | (w[..., 2] << np.uint64(32))
    mask = np.uint64(0xFFF)
    return np.stack([(v >> np.uint64(s)) & mask for s in (0, 12, 24, 36)], axis=-1).astype(np.uint16)


def field_codes(words: npt.NDArray[np.uint16], i: int) -> npt.NDArray[np.intp]:
    """(k, 3) words -> the k codes of field `i` alone: `unpack(words)[:, i]` without the other three (a
    forecast reads one field over 14 days, 20,160 minutes, at every decision)."""
    def col(j: int) -> npt.NDArray[np.intp]:
        return words[:, j].astype(np.intp)

    if i == 0:
        out: npt.NDArray[np.intp] = col(0) & 0xFFF
    elif i == 1:
        out = (col(0) >> 12) | ((col(1) & 0xFF) << 4)
    elif i == 2:
        out = (col(1) >> 8) | ((col(2) & 0xF) << 8)
    else:
        out = col(2) >> 4
    return out


def long_values(row: list[float], replicas: int, running: int, waiting: int, upstream: int,
                rates: tuple[int, int, int]) -> tuple[float, float, float, float]:
    """The long tier's four values from one aggregate row (scaler/history.py FIELDS, as a list; the
    indexes name its columns). No fresh replica: the rates and running/waiting count as 0, observed."""
    none = row[replicas] == 0.0
    out = [0.0 if (none and r != r) else r for r in (row[rates[0]], row[rates[1]], row[rates[2]])]
    parts = [0.0 if (none and x != x) else x for x in (row[running], row[waiting])]
    parts.append(row[upstream])
    got = [x for x in parts if x == x]  # x == x: not NaN
    return out[0], out[1], out[2], (math.fsum(got) if got else math.nan)


class LongTier:
    """A ring of `days` x 1,440 packed minute buckets, plus the minute being accumulated.

    Minutes are absolute (floor(t / 60)); `head` is the newest minute written to the ring, `cur` the
    minute whose observations are being summed (written when a later one arrives, or read as it is
    once `now` has passed it). `live_from`: the first minute this process saw whole; older minutes,
    and minutes it holds no value for, may be filled by `merge` (a Prometheus rebuild or a snapshot),
    newer ones it saw win."""

    def __init__(self, days: float = DEFAULT_DAYS) -> None:
        if not days > 0:
            raise ValueError(f"long history days must be > 0, got {days!r}")
        self.days = float(days)
        self.n = max(1, round(days * 1440))
        self.words = np.zeros((self.n, 3), dtype=np.uint16)
        self.head: int | None = None
        self.cur: int | None = None
        self.live_from: int | None = None
        self._sums = [0.0] * NLF
        self._counts = [0] * NLF

    # -- writing ------------------------------------------------------------------------------------

    def add(self, at: float, values: tuple[float, float, float, float]) -> None:
        """One observation's four values at time `at`; O(1). An observation for a minute older than the one
        being summed is dropped (the short tiers take late ones; a closed minute stays as it was)."""
        m = math.floor(at / MINUTE)
        if m != self.cur:
            if self.cur is not None and m < self.cur:
                return
            self._flush()
            self.cur = m
            if self.live_from is None:
                self.live_from = m + 1  # the first minute is seen in part
        sums, counts = self._sums, self._counts
        for i in range(NLF):
            v = values[i]
            if v == v:
                sums[i] += v
                counts[i] += 1

    def _cur_means(self) -> list[float]:
        return [s / c if c else math.nan for s, c in zip(self._sums, self._counts, strict=True)]

    def _flush(self) -> None:
        if self.cur is None or not any(self._counts):
            self._sums = [0.0] * NLF
            self._counts = [0] * NLF
            return
        self._advance(self.cur)
        c0, c1, c2, c3 = (encode_one(v) for v in self._cur_means())
        v = c0 | c1 << 12 | c2 << 24 | c3 << 36  # as `pack`, in Python ints
        self.words[self.cur % self.n] = (v & 0xFFFF, (v >> 16) & 0xFFFF, v >> 32)
        self._sums = [0.0] * NLF
        self._counts = [0] * NLF

    def _advance(self, m: int) -> None:
        """Make minute `m` the newest the ring can hold: clear the slots of the minutes skipped."""
        if self.head is not None and m <= self.head:
            return
        if self.head is None:
            pass  # a fresh ring is all zeros (CODE_NAN) already: writing them would make every page resident
        elif m - self.head >= self.n:
            self.words[:] = 0
        else:
            a, b = (self.head + 1) % self.n, m % self.n  # clear slots of head+1 .. m (m's own is rewritten)
            if a <= b:
                self.words[a:b + 1] = 0
            else:
                self.words[a:] = 0
                self.words[:b + 1] = 0
        self.head = m

    def step_back(self, at: float) -> None:
        """The clock stepped back to `at`: forget minutes from its minute on, and follow the new clock."""
        m = math.floor(at / MINUTE)
        self._sums, self._counts, self.cur = [0.0] * NLF, [0] * NLF, None
        if self.head is not None and self.head >= m:
            lo = max(m, self.head - self.n + 1)
            self.words[np.arange(lo, self.head + 1) % self.n] = 0
            self.head = m - 1
        self.live_from = None

    def merge(self, minutes: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> int:
        """Fill minutes from elsewhere (a Prometheus rebuild, a snapshot): `values` (k, 4), NaN = none.

        A value lands where this tier saw no whole minute of its own: before `live_from`, or where it
        holds NaN. Never into the minute being summed or later ones. Returns how many values landed."""
        minutes = np.asarray(minutes, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64).reshape(-1, NLF)
        limit = self.cur if self.cur is not None else (None if self.head is None else self.head + 1)
        keep = ~np.isnan(values).all(axis=1)
        if limit is not None:
            keep &= minutes < limit
        if not keep.any():
            return 0
        minutes, values = minutes[keep], values[keep]
        newest = int(minutes.max())
        if self.head is None or newest > self.head:
            self._advance(newest)
        assert self.head is not None
        inside = minutes > self.head - self.n
        minutes, values = minutes[inside], values[inside]
        slots = minutes % self.n
        old = unpack(self.words[slots])
        new = encode(values)
        live = self.live_from if self.live_from is not None else self.head + 1
        take = (new != CODE_NAN) & ((old == CODE_NAN) | (minutes < live)[:, None])
        self.words[slots] = pack(np.where(take, new, old))
        return int(take.sum())

    # -- reading ------------------------------------------------------------------------------------

    def minutes(self, field: str, now: float, lookback: float) -> tuple[npt.NDArray[np.float64],
                                                                          npt.NDArray[np.float64]]:
        """See ModelHistory.minutes (the contract is stated there)."""
        i = LF.get(field)
        if i is None:
            raise ValueError(f"no long series {field!r}: one of {', '.join(LONG_FIELDS)}")
        if not lookback > 0:
            raise ValueError(f"lookback must be > 0 s, got {lookback!r}")
        end = math.floor(now / MINUTE)  # the minute `now` is in: not complete, not returned
        k = math.ceil(lookback / MINUTE - 1e-9)
        wanted = np.arange(end - k, end, dtype=np.int64)
        out = np.full(k, math.nan)
        if self.head is not None:
            newest = self.head if self.cur is None else max(self.head, self.cur)  # `days` back from the newest
            # the minutes held are one run, lo..hi, of at most the ring's length: one or two slices of it
            lo, hi = max(end - k, newest - self.n + 1), min(end - 1, self.head)
            if lo <= hi:
                a, b = lo % self.n, hi % self.n
                seg = self.words[a:b + 1] if a <= b else np.concatenate((self.words[a:], self.words[:b + 1]))
                out[lo - (end - k):hi - (end - k) + 1] = _TABLE[field_codes(seg, i)]
        if self.cur is not None and end - k <= self.cur < end and self._counts[i]:
            # summed but not yet written: complete now that `now` has passed it (stored as it will be)
            out[self.cur - (end - k)] = decode(encode(self._sums[i] / self._counts[i]))
        return wanted.astype(np.float64) * MINUTE, out

    def export(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint16]]:
        """(minute numbers, their (k, 3) words) of every minute held, the one being summed included."""
        words = self.words.copy()
        head = self.head
        if self.cur is not None and any(self._counts):
            if head is None or self.cur > head:
                tmp = LongTier(self.days)
                tmp.words, tmp.head = words, head
                tmp._advance(self.cur)
                words, head = tmp.words, tmp.head
            words[self.cur % self.n] = pack(encode(self._cur_means()))
        if head is None:
            return np.empty(0, dtype=np.int64), np.empty((0, 3), dtype=np.uint16)
        minutes = np.arange(head - self.n + 1, head + 1, dtype=np.int64)
        return minutes, words[minutes % self.n]

    def nbytes(self) -> int:
        return int(self.words.nbytes)
