"""The long tier reads one field's codes straight from the packed words: the same as unpacking all four."""

from __future__ import annotations

import math

import numpy as np

from keda_llm.scaler.longhistory import CODE_MAX, LONG_FIELDS, MINUTE, NLF, LongTier, decode, field_codes, pack, unpack


def test_one_fields_codes_are_unpacks_column_for_every_field_and_every_code() -> None:
    rng = np.random.default_rng(5)
    codes = rng.integers(0, CODE_MAX + 1, size=(20_000, NLF)).astype(np.uint16)
    codes[:CODE_MAX + 1] = np.arange(CODE_MAX + 1, dtype=np.uint16)[:, None]  # every code in every field
    words = pack(codes)
    for i in range(NLF):
        got = field_codes(words, i)
        assert np.array_equal(got, unpack(words)[:, i]) and np.array_equal(got, codes[:, i])
    assert field_codes(words[:0], 2).shape == (0,)


def _minutes_by_mask(tier: LongTier, field: str, now: float, lookback: float) -> np.ndarray:
    """What `minutes` read before it sliced the ring: every wanted minute masked, its slot indexed, all four
    codes unpacked (the reference the sliced read must equal)."""
    i = LONG_FIELDS.index(field)
    end, k = math.floor(now / MINUTE), math.ceil(lookback / MINUTE - 1e-9)
    wanted = np.arange(end - k, end, dtype=np.int64)
    out = np.full(k, math.nan)
    if tier.head is not None:
        newest = tier.head if tier.cur is None else max(tier.head, tier.cur)
        held = (wanted <= tier.head) & (wanted > newest - tier.n)
        out[held] = decode(unpack(tier.words[wanted[held] % tier.n])[:, i])
    return out


def test_a_fields_minutes_read_as_slices_of_the_ring_are_the_masked_reads_through_wraps_gaps_and_merges() -> None:
    rng = np.random.default_rng(9)
    for days in (10 / 1440, 1.0 / 1440, 37 / 1440):  # rings of 10, 1 and 37 minutes
        tier = LongTier(days)
        t = 0.0
        for step in range(600):
            t += float(rng.choice([7.0, 31.0, 60.0, 400.0, 3000.0]))  # within a minute, across some, past the ring
            if step % 97 == 50:
                t -= 900.0  # the clock steps back
                tier.step_back(t)
            tier.add(t, tuple(float(x) for x in rng.uniform(0, 1e4, NLF)))
            if step % 53 == 7:
                m = np.arange(math.floor(t / MINUTE) - 30, math.floor(t / MINUTE) + 2)
                tier.merge(m, rng.uniform(0, 100, (len(m), NLF)))
            now = t + float(rng.uniform(0, 200))
            for field in LONG_FIELDS:
                lookback = float(rng.choice([60.0, 600.0, 3600.0, 86400.0, 1e6]))
                times, got = tier.minutes(field, now, lookback)
                want = _minutes_by_mask(tier, field, now, lookback)
                end = math.floor(now / MINUTE)
                cur = tier.cur
                if cur is not None and end - len(want) <= cur < end:  # the minute being summed, patched alike
                    want[cur - (end - len(want))] = got[cur - (end - len(want))]
                assert np.array_equal(got, want, equal_nan=True), (days, step, field, lookback)
                assert len(times) == len(got)
