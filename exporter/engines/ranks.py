"""Shared steps of every adapter: grouping by model and role, and folding rank series into one value.

Rank rule (DESIGN.md "The metric vocabulary"): series that differ only in a *replica* label (SGLang's
`tp_rank`/`pp_rank`/`moe_ep_rank`, a stray multiprocess `pid`) describe the same batch seen from several
processes, so the largest is taken; series that differ in any other label (vLLM's data-parallel `engine`,
SGLang's `dp_rank`, a `finished_reason`, a Triton model `version`) are disjoint parts and are summed. The
KV ratio is weighted by each part's capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Iterable, Mapping, Sequence

from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import Histogram, Sample

#: Labels whose values are copies of the same state (take the largest), never summed.
REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "pid"})

Series = dict[str, list[Sample]]  # sample name -> its samples, within one (model, role) group
GroupKey = tuple[str, str]  # (model, role)


def check_unique(samples: Iterable[Sample]) -> None:
    """ScrapeError("duplicate") when one series (name and label set) appears twice."""
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for s in samples:
        key = (s.name, frozenset(s.labels.items()))
        if key in seen:
            raise ScrapeError("duplicate", f"series {_show(s)} appears more than once")
        seen.add(key)


def finite(s: Sample) -> float:
    """The sample's value; ScrapeError("invalid_value") for NaN or +-Inf."""
    v = s.value
    if v - v != 0.0:  # NaN and +-Inf, without a call
        raise ScrapeError("invalid_value", f"{_show(s)} is {v}")
    return v


def histogram_names(*bases: str) -> tuple[str, ...]:
    """The sample names a histogram family writes (`_bucket`, `_sum`, `_count`), for an adapter's WANTED."""
    return tuple(base + suffix for base in bases for suffix in ("_bucket", "_sum", "_count"))


def by_name(samples: Iterable[Sample]) -> Series:
    """Samples by name: the one group of a body that serves one model (TGI, llama.cpp)."""
    out: Series = {}
    for s in samples:
        out.setdefault(s.name, []).append(s)
    return out


def group(samples: Iterable[Sample], key: Callable[[Sample], GroupKey]) -> dict[GroupKey, Series]:
    """Samples split by (model, role), then by name."""
    out: dict[GroupKey, Series] = {}
    for s in samples:
        out.setdefault(key(s), {}).setdefault(s.name, []).append(s)
    return out


def pick(series: Series, *names: str) -> list[Sample]:
    """The samples of the first name present: new spellings first, older ones as fallback."""
    for name in names:
        found = series.get(name)
        if found:
            return found
    return []


def where(samples: Sequence[Sample], label: str, value: str) -> list[Sample]:
    return [s for s in samples if s.labels.get(label) == value]


def _part(labels: Mapping[str, str], ignore: frozenset[str]) -> frozenset[tuple[str, str]]:
    if REPLICA_LABELS.isdisjoint(labels) and ignore.isdisjoint(labels):
        return frozenset(labels.items())  # the common case, all in C
    return frozenset((k, v) for k, v in labels.items() if k not in ignore and k not in REPLICA_LABELS)


def total(samples: Sequence[Sample], ignore: frozenset[str] = frozenset()) -> float | None:
    """Sum over disjoint parts of the largest value among replicas; None when there is no sample.

    `ignore`: labels that do not tell parts apart (e.g. the `le` of a bucket is handled elsewhere).
    """
    if not samples:
        return None
    if len(samples) == 1:
        return finite(samples[0])
    parts: dict[frozenset[tuple[str, str]], float] = {}
    for s in samples:
        key = _part(s.labels, ignore)
        v = finite(s)
        old = parts.get(key)
        if old is None or v > old:
            parts[key] = v
    return sum(parts.values())


def plus(base: float | None, *parts: float | None) -> float | None:
    """A signal and the parts an engine reports beside it (a second queue, cached prompt tokens): the base
    plus every part reported; None when the base itself is not (a part alone is not the signal)."""
    return None if base is None else base + sum(p for p in parts if p is not None)


def without_breakdown(samples: Sequence[Sample], label: str, names: Container[str]) -> list[Sample]:
    """The samples less the series of `names` that break a total down by `label`, for each such name whose
    total is also written (the same name with `label` empty or absent): adding the breakdown to its total
    counts every request twice. A name written only broken down keeps its parts (they are disjoint and
    summed), and so does every name not in `names` (its `label` values are disjoint parts, not a total)."""
    totals = {s.name for s in samples if s.name in names and not s.labels.get(label)}
    return [s for s in samples if not s.labels.get(label) or s.name not in totals]


def per_part(samples: Sequence[Sample], part_label: str) -> dict[str, float]:
    """The largest value among replicas for each value of `part_label` ("" when absent)."""
    out: dict[str, float] = {}
    for s in samples:
        key = s.labels.get(part_label, "")
        v = finite(s)
        old = out.get(key)
        if old is None or v > old:
            out[key] = v
    return out


def weighted_ratio(ratios: Mapping[str, float], capacities: Mapping[str, float]
                   ) -> tuple[float | None, float | None]:
    """(KV ratio, capacity) over parts: the ratio weighted by each part's capacity, capacities summed.

    When a part's capacity is unknown (absent or 0), a weighted mean cannot be formed and a partial sum
    would understate the capacity: the ratio is then the plain mean over the parts that report one, and
    the capacity is None. Capacities of parts without a ratio still add to the capacity.
    """
    if not ratios:
        return None, (sum(capacities.values()) if capacities else None)
    if all(capacities.get(k, 0.0) > 0.0 for k in ratios):
        cap = sum(capacities.values())
        if len(ratios) == 1:
            return next(iter(ratios.values())), cap
        used = sum(r * capacities[k] for k, r in ratios.items())
        return used / sum(capacities[k] for k in ratios), cap
    return sum(ratios.values()) / len(ratios), None


def histogram(series: Series, base: str, ignore: frozenset[str] = frozenset()) -> Histogram | None:
    """The histogram `base` (from `base_bucket`, `_sum`, `_count`), summed over parts.

    Replicas of one part: the one with the largest count. Parts whose bucket bounds differ cannot be
    added, so the histogram is then None (not reported) rather than wrong. None too when the buckets or
    the sum are missing.
    """
    buckets = series.get(base + "_bucket")
    sums = series.get(base + "_sum")
    if not buckets or not sums:
        return None
    counts = series.get(base + "_count", [])
    # part -> replica label set -> [bounds->count, sum, count]
    parts: dict[frozenset[tuple[str, str]], dict[frozenset[tuple[str, str]], _Hist]] = {}
    for s in buckets:
        labels = dict(s.labels)
        le = labels.pop("le", None)
        try:
            bound = float(le) if le is not None else math.nan
        except ValueError:
            bound = math.nan
        if bound != bound:
            raise ScrapeError("invalid_value", f"{_show(s)} has no numeric 'le' label")
        _slot(parts, labels, ignore).buckets[bound] = finite(s)
    for s in sums:
        _slot(parts, s.labels, ignore).sum = finite(s)
    for s in counts:
        _slot(parts, s.labels, ignore).count = finite(s)
    chosen: list[_Hist] = []
    for replicas in parts.values():
        best = max(replicas.values(), key=_Hist.total)
        if best.sum is None or not best.buckets:
            return None
        chosen.append(best)
    bounds = sorted(chosen[0].buckets)
    if any(sorted(h.buckets) != bounds for h in chosen[1:]):
        return None
    cumulative = tuple((b, sum(h.buckets[b] for h in chosen)) for b in bounds)
    count = sum(h.total() for h in chosen)
    if bounds[-1] != math.inf:
        cumulative = (*cumulative, (math.inf, count))
    return Histogram(buckets=cumulative, sum=sum(h.sum or 0.0 for h in chosen), count=count)


def first_histogram(series: Series, names: Sequence[str]) -> Histogram | None:
    """The histogram under the first of `names` (new spelling first) that has buckets."""
    for name in names:
        if name + "_bucket" in series:
            return histogram(series, name)
    return None


_NO_REPLICA: frozenset[tuple[str, str]] = frozenset()


class _Hist:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum: float | None = None
        self.count: float | None = None

    def total(self) -> float:
        if self.count is not None:
            return self.count
        return self.buckets.get(math.inf, 0.0)


def _slot(parts: dict[frozenset[tuple[str, str]], dict[frozenset[tuple[str, str]], _Hist]],
          labels: Mapping[str, str], ignore: frozenset[str]) -> _Hist:
    replicas = parts.setdefault(_part(labels, ignore), {})
    key = _NO_REPLICA if REPLICA_LABELS.isdisjoint(labels) else frozenset(
        (k, v) for k, v in labels.items() if k in REPLICA_LABELS)
    found = replicas.get(key)
    if found is None:
        found = replicas[key] = _Hist()
    return found


def _show(s: Sample) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items())
    return f"{s.name}{{{labels}}}" if labels else s.name
