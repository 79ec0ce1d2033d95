"""Per-model history: what the replicas of one model reported, kept compactly for an hour and more.

Two stores, both fixed-size numpy ring buffers (no per-sample Python objects, so 1,000 models fit
in a few tens of MB):

- the model's aggregate series (demand and capacity summed over its fresh replicas), in three
  tiers that downsample as data ages: 1 s buckets for 5 min, 10 s for 15 min, 60 s for 75 min;
- per replica, its last 64 samples (gauges and counter-derived token rates) for the stable window;
- the long tier (scaler/longhistory.py): 14 days of per-minute means of request and token rates and
  of demand, 6 bytes a minute, for seasonal forecasting (`minutes`). It survives a restart by being
  rebuilt from Prometheus (scaler/backfill.py) or read from a per-pod snapshot (scaler/snapshot.py).

Sum vs mean across replicas is decided here, once (see `aggregate`): counts, tokens and rates are
summed; the KV usage ratio is a capacity-weighted mean (with the plain mean and the max kept for
the `aggregation` key); per-replica capacity and batch limit are means over the replicas that
report them. Nothing here reads a clock: freshness is judged against the `now` a caller passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np
import numpy.typing as npt

from keda_llm.scaler import itl_floor
from keda_llm.scaler.longhistory import DEFAULT_DAYS, LongTier, long_values
from keda_llm.scaler.model import Observation, ReplicaSample

# The aggregate series, one column each. NaN in a row = no fresh replica reported that signal.
FIELDS = (
    "replicas",  # fresh, up replicas (reporting supply)
    "running",  # Σ requests running
    "waiting",  # Σ requests waiting in the engines
    "kv_used",  # Σ kv_usage_ratio x kv_capacity_tokens (tokens held), replicas reporting both
    "kv_capacity",  # Σ kv_capacity_tokens over those same replicas
    "kv_replicas",  # how many replicas reported both
    "kv_ratio_mean",  # unweighted mean of the replicas' usage ratios
    "kv_ratio_max",  # the fullest replica's usage ratio
    "max_running",  # Σ batch limits, replicas reporting one
    "max_running_replicas",  # how many reported one
    "prompt_rate",  # Σ prompt tokens/s (from counters)
    "generation_rate",  # Σ generated tokens/s
    "finished_rate",  # Σ requests finished/s
    "upstream",  # demand seen upstream (activationQuery), requests
    "ttft_sum_rate",  # Σ rate of llm_time_to_first_token_seconds_sum (seconds of TTFT per second)
    "ttft_count_rate",  # Σ rate of its _count: first tokens (requests) per second
    "itl_sum_rate",  # Σ rate of llm_inter_token_latency_seconds_sum
    "itl_count_rate",  # Σ rate of its _count: inter-token gaps per second
    "prefix_queried_rate",  # Σ prompt tokens/s looked up in the prefix cache
    "prefix_hit_rate",  # Σ of those found there (the prefill pool computes the rest: scaler/pools.py)

    "lora_demand",  # Σ adapters running + waiting (not running), replicas reporting adapter slots
    "lora_slots",  # Σ adapter slots (max_lora) over those same replicas
    "lora_replicas",  # how many replicas reported adapter slots
    "lora_waiting",  # Σ adapters waiting for a slot over those replicas
)
F = {name: i for i, name in enumerate(FIELDS)}
NF = len(FIELDS)
# the aggregate columns the long tier reads (scaler/longhistory.py long_values)
_LONG_COLUMNS = (F["replicas"], F["running"], F["waiting"], F["upstream"],
                 (F["finished_rate"], F["prompt_rate"], F["generation_rate"]))

# (bucket seconds, buckets, dtype): 5 min at 1 s, 15 min at 10 s, 75 min at 60 s. The 1 s tier,
# which the decision windows read, keeps float64; the older tiers, for trends, float32.
TIERS: tuple[tuple[float, int, npt.DTypeLike], ...] = (
    (1.0, 300, np.float64),
    (10.0, 90, np.float32),
    (60.0, 75, np.float32),
)
REPLICA_RING = 64
# Per-replica ring columns.
RFIELDS = ("timestamp", "running", "waiting", "kv_usage_ratio", "kv_capacity_tokens", "prompt_rate",
           "generation_rate", "finished_rate", "ttft_sum_rate", "ttft_count_rate", "itl_sum_rate", "itl_count_rate")
RF = {name: i for i, name in enumerate(RFIELDS)}
#: the ring columns `replica_windows` averages, in the order it unpacks them
_WINDOW_COLUMNS = [RF[name] for name in ("running", "generation_rate", "ttft_sum_rate", "ttft_count_rate",
                                         "itl_sum_rate", "itl_count_rate", "waiting")]


@dataclass(frozen=True)
class Load:
    """Window means of the aggregate series (see FIELDS); None = not reported in the window."""

    replicas: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_used: float | None = None
    kv_capacity: float | None = None
    kv_replicas: float | None = None
    kv_ratio_mean: float | None = None
    kv_ratio_max: float | None = None
    max_running: float | None = None
    max_running_replicas: float | None = None
    prompt_rate: float | None = None
    generation_rate: float | None = None
    finished_rate: float | None = None
    upstream: float | None = None
    ttft_sum_rate: float | None = None
    ttft_count_rate: float | None = None
    itl_sum_rate: float | None = None
    itl_count_rate: float | None = None
    prefix_queried_rate: float | None = None
    prefix_hit_rate: float | None = None

    @property
    def prefix_hit_ratio(self) -> float | None:
        """Hits / lookups of the prefix cache in the window, in tokens (None: not reported, or no lookup)."""
        return _ratio(self.prefix_hit_rate, self.prefix_queried_rate)

    lora_demand: float | None = None
    lora_slots: float | None = None
    lora_replicas: float | None = None
    lora_waiting: float | None = None

    @property
    def mean_ttft(self) -> float | None:
        """Mean TTFT of the requests that got their first token in the window: rate(_sum) / rate(_count),
        a ratio of sums over the replicas (as PromQL's sum(rate(x_sum)) / sum(rate(x_count)))."""
        return _ratio(self.ttft_sum_rate, self.ttft_count_rate)

    @property
    def mean_itl(self) -> float | None:
        """Mean inter-token gap in the window (every gap weighs the same, as the engines' histogram counts)."""
        return _ratio(self.itl_sum_rate, self.itl_count_rate)

    @staticmethod
    def from_row(row: npt.NDArray[np.float64]) -> Load:
        return Load(*[None if v != v else v for v in row.tolist()])  # v != v: NaN; tolist() gives floats

    def row(self) -> npt.NDArray[np.float64]:
        return np.array([math.nan if v is None else v for v in (getattr(self, f.name) for f in fields(self))])


@dataclass(frozen=True)
class Rates:
    """Counter-derived rates of one replica (per second), from its last two distinct scrapes."""

    prompt: float | None = None
    generation: float | None = None
    finished: float | None = None
    ttft_sum: float | None = None
    ttft_count: float | None = None
    itl_sum: float | None = None
    itl_count: float | None = None
    prefix_queried: float | None = None
    prefix_hit: float | None = None


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else num / den


def counter_rate(prev: float | None, cur: float | None, dt: float) -> float | None:
    """Per-second increase; None across a decrease (see `_ReplicaTrack.add`)."""
    if prev is None or cur is None or dt <= 0 or cur < prev:
        return None
    return (cur - prev) / dt


def _went_down(pairs: tuple[tuple[float | None, float | None], ...]) -> bool:
    return any(p is not None and c is not None and c < p for p, c in pairs)


def is_fresh(sample: ReplicaSample, now: float, stale_after: float) -> bool:
    """Up, and scraped successfully within `stale_after` of `now`."""
    return sample.up and sample.timestamp > 0 and now - sample.timestamp <= stale_after


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else v


#: each replica's counter rates (Rates fields) and the aggregate field their sum goes to
_RATE_SUMS = tuple((name, F[name + "_rate"]) for name in (
    "prompt", "generation", "finished", "ttft_sum", "ttft_count", "itl_sum", "itl_count", "prefix_queried",
    "prefix_hit"))
#: rates read only as a ratio of the two (a mean latency, a hit rate): a replica counts in both sums or in
#: neither, else one reporting a histogram's _count without its _sum dilutes the mean (0.4 s read as 0.2 s)
_PAIRED = {"ttft_sum": "ttft_count", "ttft_count": "ttft_sum", "itl_sum": "itl_count", "itl_count": "itl_sum",
           "prefix_queried": "prefix_hit", "prefix_hit": "prefix_queried"}


def aggregate(samples: tuple[ReplicaSample, ...], rates: dict[str, Rates], upstream: float | None, now: float,
              stale_after: float) -> npt.NDArray[np.float64]:
    """One row of FIELDS over the fresh replicas: the single place sum-vs-mean is decided.

    NaN and infinite values are treated as not reported (a bad gauge never becomes a number). One pass over
    the replicas (this runs on every collection and decision); sums are math.fsum, exact whatever the order.
    """
    row = np.full(NF, math.nan)
    n = 0
    running: list[float] = []
    waiting: list[float] = []
    kv_u: list[float] = []
    kv_c: list[float] = []
    limits: list[float] = []
    rate_vals: list[list[float]] = [[] for _ in _RATE_SUMS]
    lora: list[tuple[float, float, float]] = []
    isfinite = math.isfinite
    for s in samples:
        if not is_fresh(s, now, stale_after):
            continue
        n += 1
        v = s.running
        if v is not None and isfinite(v):
            running.append(v)
        v = s.waiting
        if v is not None and isfinite(v):
            waiting.append(v)
        u, c = s.kv_usage_ratio, s.kv_capacity_tokens
        if u is not None and c is not None and isfinite(u) and isfinite(c) and c > 0:
            kv_u.append(u)
            kv_c.append(c)
        v = s.max_running
        if v is not None and isfinite(v) and v > 0:
            limits.append(v)
        r = rates.get(s.pod)
        if r is not None:
            for vals, (name, _) in zip(rate_vals, _RATE_SUMS, strict=True):
                x = getattr(r, name)
                if x is not None and (name not in _PAIRED or getattr(r, _PAIRED[name]) is not None):
                    vals.append(x)
        m = _num(s.lora_max)
        if m is not None and m > 0:
            lora.append((_num(s.lora_running) or 0.0, _num(s.lora_waiting) or 0.0, m))
    row[F["replicas"]] = n
    up = _num(upstream)
    if up is not None:
        row[F["upstream"]] = max(0.0, up)
    if running:
        row[F["running"]] = math.fsum(running)
    if waiting:
        row[F["waiting"]] = math.fsum(waiting)
    if kv_u:
        row[F["kv_used"]] = math.fsum(u * c for u, c in zip(kv_u, kv_c, strict=True))  # summed: tokens held
        row[F["kv_capacity"]] = math.fsum(kv_c)  # summed: tokens of room
        row[F["kv_replicas"]] = len(kv_u)
        row[F["kv_ratio_mean"]] = math.fsum(kv_u) / len(kv_u)  # mean: each replica alike
        row[F["kv_ratio_max"]] = max(kv_u)
    if limits:
        row[F["max_running"]] = math.fsum(limits)
        row[F["max_running_replicas"]] = len(limits)
    for vals, (_, col) in zip(rate_vals, _RATE_SUMS, strict=True):
        if vals:
            row[col] = math.fsum(vals)
    if lora:
        row[F["lora_demand"]] = math.fsum(r + w for r, w, _ in lora)
        row[F["lora_slots"]] = math.fsum(m for _, _, m in lora)
        row[F["lora_replicas"]] = len(lora)
        row[F["lora_waiting"]] = math.fsum(w for _, w, _ in lora)
    return row


_EMPTY = np.iinfo(np.int64).min  # a slot that never held a bucket (matches no window)


class _Tier:
    """A ring of time buckets; each bucket holds per-field sums and counts of the rows that fell in it."""

    def __init__(self, seconds: float, n: int, dtype: npt.DTypeLike) -> None:
        self.seconds = seconds
        self.n = n
        self.ids = np.full(n, _EMPTY, dtype=np.int64)  # absolute bucket number held in each slot
        self.sums = np.zeros((n, NF), dtype=dtype)
        self.counts = np.zeros((n, NF), dtype=np.uint16)

    def add(self, at: float, row: npt.NDArray[np.float64], present: npt.NDArray[np.bool_] | None = None) -> None:
        """Add `row` (NaN: not reported) to its bucket; `present` is ~isnan(row) when the caller has it."""
        b = math.floor(at / self.seconds)
        slot = b % self.n
        if self.ids[slot] > b:  # older than what the ring already holds there: gone
            return
        if self.ids[slot] != b:
            self.ids[slot] = b
            self.sums[slot] = 0
            self.counts[slot] = 0
        if present is None:
            present = ~np.isnan(row)
        # in place on the slot's own rows, only where the row has a value (the sum in the tier's dtype, as
        # the row converted to it; a count stops at the uint16 top)
        sums, counts = self.sums[slot], self.counts[slot]
        np.add(sums, row.astype(self.sums.dtype, copy=False), out=sums, where=present)
        np.add(counts, np.uint16(1), out=counts, where=present & (counts < 65535))

    def span(self) -> float:
        return self.seconds * self.n

    def bucket_means(self, now: float, window: float) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Buckets in (now - window, now], oldest first: (bucket numbers, per-field means, NaN = none)."""
        hi = math.floor(now / self.seconds)
        lo = hi - max(1, math.ceil(window / self.seconds - 1e-9)) + 1
        if hi - lo < self.n:  # each bucket number has one slot: read those slots, oldest first
            wanted = np.arange(lo, hi + 1, dtype=np.int64)
            slots = wanted % self.n
            order = slots[self.ids[slots] == wanted]
        else:  # a window longer than the ring (the coarsest tier's fallback): whatever it still holds
            sel = np.nonzero((self.ids >= lo) & (self.ids <= hi))[0]
            order = sel[np.argsort(self.ids[sel], kind="stable")]
        counts = self.counts[order].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, self.sums[order].astype(np.float64) / counts, math.nan)
        return self.ids[order], means

    def latest(self, now: float) -> npt.NDArray[np.float64] | None:
        """The mean row of the newest bucket at or before `now`."""
        hi = math.floor(now / self.seconds)
        sel = np.nonzero((self.ids > _EMPTY) & (self.ids <= hi))[0]
        if sel.size == 0:
            return None
        slot = sel[np.argmax(self.ids[sel])]
        counts = self.counts[slot].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, self.sums[slot].astype(np.float64) / counts, math.nan)

    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.sums.nbytes + self.counts.nbytes)


def window_mean(bucket_means: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Mean over the buckets that hold data, per field (each bucket weighs the same: a time average).

    Knative's buckets count missing seconds as 0, because its pods push a value every second;
    ours are gauge snapshots at the collection cadence (1-5 s), so an empty bucket means "not
    sampled" and is skipped instead.
    """
    if bucket_means.size == 0:
        return np.full(NF, math.nan)
    present = ~np.isnan(bucket_means)
    n = present.sum(axis=0)
    total = np.where(present, bucket_means, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), math.nan)


#: the replica counters, in Rates' field order
_COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "requests_finished_total", "ttft_sum", "ttft_count",
             "itl_sum", "itl_count", "prefix_queried_total", "prefix_hit_total")


class _ReplicaTrack:
    """One replica's recent samples and what is needed for its counter rates."""

    __slots__ = ("ever_up", "last", "last_listed", "pos", "rates", "ring", "size")

    def __init__(self) -> None:
        self.ring = np.full((REPLICA_RING, len(RFIELDS)), math.nan)
        self.pos = 0
        self.size = 0
        self.last: ReplicaSample | None = None
        self.rates = Rates()
        self.ever_up = False
        self.last_listed = 0.0

    def add(self, s: ReplicaSample) -> None:
        prev = self.last
        if prev is not None and s.timestamp <= prev.timestamp:
            return  # the same scrape seen again (or an older one): nothing new
        if prev is not None and prev.up and s.up:
            dt = s.timestamp - prev.timestamp
            pairs = tuple((_num(getattr(prev, f)), _num(getattr(s, f))) for f in _COUNTERS)
            # A counter that went down (an engine restart, a reading published late, two pods trading names)
            # gives no rates for this one interval, for any counter of the replica: counted from zero, as
            # Prometheus' rate() does, a swap or a late reading read as 500,000 tokens a second, and a _sum
            # reset without its _count made a mean TTFT six times too long. A restart costs one interval.
            self.rates = Rates() if _went_down(pairs) else Rates(*(counter_rate(p, c, dt) for p, c in pairs))
        elif not s.up:
            self.rates = Rates()
        self.last = s
        if s.up and s.timestamp > 0:
            self.ever_up = True
        r = self.rates
        self.ring[self.pos] = [s.timestamp, *[math.nan if v is None else v for v in (
            _num(s.running), _num(s.waiting), _num(s.kv_usage_ratio), _num(s.kv_capacity_tokens),
            r.prompt, r.generation, r.finished, r.ttft_sum, r.ttft_count, r.itl_sum, r.itl_count)]]
        self.pos = (self.pos + 1) % REPLICA_RING
        self.size = min(self.size + 1, REPLICA_RING)


@dataclass(frozen=True)
class ReplicaWindow:
    """One fresh replica over a window: what the degraded-replica rule (scaler/health.py) reads."""

    pod: str
    degraded: tuple[str, ...]  # the exporter's llm_replica_degraded reasons in the latest sample
    running: float | None  # mean requests running over the window's samples
    generation_rate: float | None  # mean generated tokens/s over the window's samples
    ttft: float | None = None  # the replica's mean TTFT in the window (its rate(_sum) / rate(_count)); None: none
    ttft_count: float = 0.0  # first tokens it gave in the window (mean count rate x the window)
    itl: float | None = None  # its mean inter-token gap in the window
    itl_count: float = 0.0  # inter-token gaps it gave in the window
    waiting: float | None = None  # mean requests waiting in its engine over the window's samples


@dataclass(frozen=True)
class Snapshot:
    """The model as of `now`, from the latest observation: who is fresh, loading or stale, and the latest sums."""

    at: float  # when the latest observation was collected
    fresh: int  # up, and scraped within staleAfter of now
    loading: int  # listed but never seen up: a replica still starting (supply that is coming)
    stale: int  # listed, seen up before, no fresh scrape now: excluded, and the data is stale
    data_age: float  # now - the newest fresh scrape (inf when none)
    latest: Load  # the aggregate over the fresh replicas, judged at now
    max_startup_seconds: float | None  # the largest llm_engine_startup_seconds reported
    lifetime_prompt_per_request: float | None  # Σ prompt tokens / Σ finished requests since the engines started
    prefill_rate: float | None = None  # one queueing replica's prompt tokens/s (`saturated_prefill_rate`)


class HistoryView(Protocol):
    """What the scaler's service and `decide` (with the forecast) read of one model's history.

    ModelHistory is the implementation; the service's lookups and `decide` are typed with this, so mypy
    checks every reader against what a history offers."""

    @property
    def namespace(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def last_at(self) -> float | None: ...

    @property
    def last_demand_at(self) -> float | None: ...

    def snapshot(self, now: float, stale_after: float | None = None) -> Snapshot | None: ...

    def window(self, now: float, seconds: float) -> Load: ...

    def series(self, name: str, now: float, seconds: float) -> tuple[npt.NDArray[np.float64],
                                                                     npt.NDArray[np.float64]]: ...

    def minutes(self, name: str, now: float, lookback: float) -> tuple[npt.NDArray[np.float64],
                                                                       npt.NDArray[np.float64]]: ...

    def replica_windows(self, now: float, seconds: float, stale_after: float | None = None
                        ) -> list[ReplicaWindow]: ...

    def itl_floor(self) -> float | None: ...


class ModelHistory:
    """The history of one model in one namespace. ingest() observations, query windows with a `now`."""

    def __init__(self, namespace: str, model: str, stale_after: float = 30.0, long_days: float = DEFAULT_DAYS, *,
                 split_pools: bool = True) -> None:
        self.namespace = namespace
        self._split_pools = split_pools  # False for a pool's own history (it holds one role already)
        self.model = model
        self.stale_after = stale_after
        self._tiers = [_Tier(s, n, dt) for s, n, dt in TIERS]
        self.long = LongTier(long_days)
        self._replicas: dict[str, _ReplicaTrack] = {}
        self._latest: Observation | None = None
        self._max_startup: float | None = None
        self._last_demand_at: float | None = None
        self._pools: dict[str, ModelHistory] = {}  # role -> the history of that pool's replicas alone
        # window(), replica_windows() and series() answers at one `now` since the last ingest: a decision reads
        # the same windows several times (the policy, the health rules, the latency term), and the forecast
        # reads every field's series over one lookback. Kept for one `now` only, so a model that stops being
        # collected does not grow them.
        self._memo_now = math.nan
        self._windows: dict[tuple[float, float], Load] = {}
        self._replica_windows: dict[tuple[float, float, float], tuple[ReplicaWindow, ...]] = {}
        self._series: dict[float, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = {}
        self._prefill_rate: tuple[float | None] | None = None  # saturated_prefill_rate() since the last ingest
        self._itl_floor: tuple[float | None] | None = None  # itl_floor() since the last ingest
        self._rings: npt.NDArray[np.float64] | None = None  # _stacked() since the last ingest
        self._last_itl_floor: float | None = None  # the last fit: a batch that stops moving gives none
        # the newest observation's aggregate row (at its own time, the history's bound): what snapshot() judged
        # at that same time and bound would compute again (the replicas' rates change only on ingest)
        self._latest_row: tuple[float, npt.NDArray[np.float64]] | None = None  # (its bound, the row)

    @property
    def last_at(self) -> float | None:
        return None if self._latest is None else self._latest.at

    @property
    def last_demand_at(self) -> float | None:
        """The last collection that saw demand: a fresh replica running or queueing, or upstream demand.
        The idle timer of scale to zero counts from here, between polls too."""
        return self._last_demand_at

    def ingest(self, obs: Observation) -> None:
        """Add one collection cycle. Observations must come in time order; an older one only fills gaps."""
        self._forget_windows(math.nan)
        self._prefill_rate = self._itl_floor = self._rings = None
        if self._latest is not None and obs.at < self._latest.at:
            if self._latest.at - obs.at <= max(self.stale_after, 60.0):
                self._add_row(obs)  # late: into the buckets it belongs to, the latest snapshot stays
                self._ingest_pools(obs)
                return
            # Far older than the newest: the clock stepped back. Follow the new clock: counter rates start
            # over (their time deltas would be negative) and the idle timer counts from the step at most.
            self._replicas = {}
            self.long.step_back(obs.at)
            if self._last_demand_at is not None and self._last_demand_at > obs.at:
                self._last_demand_at = obs.at
        for s in obs.replicas:
            track = self._replicas.get(s.pod)
            if track is None:
                track = self._replicas[s.pod] = _ReplicaTrack()
            track.add(s)
            track.last_listed = obs.at
            st = _num(s.startup_seconds)
            if st is not None and st > 0:
                self._max_startup = st if self._max_startup is None else max(self._max_startup, st)
        # Replicas the collection no longer lists are gone (pod deleted): forget them after a while.
        horizon = obs.at - max(self.stale_after, 60.0) * 2
        for pod in [p for p, t in self._replicas.items() if t.last_listed < horizon]:
            del self._replicas[pod]
        self._latest = obs
        row = self._add_row(obs)
        self._latest_row = (self.stale_after, row)
        if any(row[F[name]] > 0 for name in ("running", "waiting", "upstream")):  # NaN > 0 is False
            self._last_demand_at = obs.at
        self._ingest_pools(obs)

    def _forget_windows(self, now: float) -> None:
        self._memo_now = now
        self._windows.clear()
        self._replica_windows.clear()
        self._series.clear()

    def _ingest_pools(self, obs: Observation) -> None:
        """Once a replica reports a role other than unified (disaggregated serving), keep a history per
        role too, so each pool's demand and capacity is its own (scaler/pools.py). Upstream demand goes
        to the prefill pool, where a request starts."""
        if not self._split_pools or (not self._pools and all(s.role == "unified" for s in obs.replicas)):
            return
        for role in sorted({s.role for s in obs.replicas} | set(self._pools)):
            pool = self._pools.get(role)
            if pool is None:
                pool = self._pools[role] = ModelHistory(self.namespace, self.model, self.stale_after,
                                                         split_pools=False)
            upstream = obs.upstream_demand if role == "prefill" else None
            pool.ingest(Observation(obs.namespace, obs.model, obs.at,
                                    tuple(s for s in obs.replicas if s.role == role), upstream))

    def pool(self, role: str) -> ModelHistory | None:
        """The history of the replicas with this `role` label; None until one reported a non-unified role."""
        return self._pools.get(role)

    def _rates(self) -> dict[str, Rates]:
        return {pod: t.rates for pod, t in self._replicas.items()}

    def _add_row(self, obs: Observation) -> npt.NDArray[np.float64]:
        row = aggregate(obs.replicas, self._rates(), obs.upstream_demand, obs.at, self.stale_after)
        present = ~np.isnan(row)
        for tier in self._tiers:
            tier.add(obs.at, row, present)
        self.long.add(obs.at, long_values(row.tolist(), *_LONG_COLUMNS))
        return row

    def snapshot(self, now: float, stale_after: float | None = None) -> Snapshot | None:
        """The latest observation judged at `now`; None when nothing was ever ingested.

        `stale_after` overrides the history's own bound (a ScaledObject's `staleAfter`); the aggregate
        series were filtered at ingest with the history's bound.
        """
        obs = self._latest
        if obs is None:
            return None
        bound = self.stale_after if stale_after is None else stale_after
        fresh = loading = stale = 0
        newest = -math.inf
        for s in obs.replicas:
            if is_fresh(s, now, bound):
                fresh += 1
                newest = max(newest, s.timestamp)
            elif self._replicas.get(s.pod) is not None and self._replicas[s.pod].ever_up:
                stale += 1
            else:
                loading += 1
        kept = self._latest_row
        if kept is not None and now == obs.at and bound == kept[0]:
            row = kept[1]
        else:
            row = aggregate(obs.replicas, self._rates(), obs.upstream_demand, now, bound)
        latest = Load.from_row(row)
        prompts = [_num(s.prompt_tokens_total) for s in obs.replicas if is_fresh(s, now, bound)]
        finished = [_num(s.requests_finished_total) for s in obs.replicas if is_fresh(s, now, bound)]
        lifetime = None
        if prompts and all(p is not None for p in prompts) and all(f is not None for f in finished):
            total_f = math.fsum(f for f in finished if f is not None)
            if total_f > 0:
                lifetime = math.fsum(p for p in prompts if p is not None) / total_f
        return Snapshot(obs.at, fresh, loading, stale, now - newest if fresh else math.inf, latest,
                        self._max_startup, lifetime, self.saturated_prefill_rate())

    def saturated_prefill_rate(self) -> float | None:
        """The measured prefill throughput of one replica: the median prompt-token rate over the retained
        samples (about 5 minutes) of replicas that had requests waiting. A replica with a queue prefills
        as fast as it can, so its prompt rate then is its capacity for the mix it serves; an idle or
        lightly loaded replica's rate says only what it was asked. None when no replica queued lately."""
        if self._prefill_rate is None:  # the rings change only on ingest
            self._prefill_rate = (self._saturated_prefill_rate(),)
        return self._prefill_rate[0]

    def itl_floor(self) -> float | None:
        """The ITL one replica shows at a batch of one, fitted from how the replicas' ITL moved with their
        batch over the retained samples (about 5 minutes; scaler/itl_floor.py); while they say nothing (a
        steady batch), the last fit: the hardware did not change. None until a first fit."""
        if self._itl_floor is None:  # the rings change only on ingest
            rings = self._stacked()
            fit = None
            if rings.size:
                fit = itl_floor.estimate(rings[:, :, RF["running"]], rings[:, :, RF["itl_sum_rate"]],
                                         rings[:, :, RF["itl_count_rate"]])
            if fit is not None:
                self._last_itl_floor = fit
            self._itl_floor = (self._last_itl_floor,)
        return self._itl_floor[0]

    def _stacked(self) -> npt.NDArray[np.float64]:
        """Every replica's ring that holds a sample, stacked (replica x sample x field; no replica: empty),
        once per ingest for the fits that read them all."""
        if self._rings is None:
            tracks = [t.ring for t in self._replicas.values() if t.size]
            self._rings = np.stack(tracks) if tracks else np.empty((0, REPLICA_RING, len(RFIELDS)))
        return self._rings

    def _saturated_prefill_rate(self) -> float | None:
        rings = self._stacked()  # rows a ring has not written yet are NaN: never busy
        if not rings.size:
            return None
        busy = rings[:, :, RF["waiting"]] > 0  # NaN > 0 is False
        rate = rings[:, :, RF["prompt_rate"]][busy]
        saturated = rate[np.isfinite(rate) & (rate > 0)]
        return float(np.median(saturated)) if saturated.size else None

    def window(self, now: float, seconds: float) -> Load:
        """Means over (now - seconds, now], read from the finest tier that spans the window.

        A window with no bucket (collection slower than the window) holds the newest bucket before it.
        """
        if now != self._memo_now:
            self._forget_windows(now)
        kept = self._windows.get((now, seconds))
        if kept is not None:
            return kept
        tier = next((t for t in self._tiers if t.span() >= seconds), self._tiers[-1])
        _, means = tier.bucket_means(now, seconds)
        out = window_mean(means)
        if np.isnan(out[F["replicas"]]):
            latest = tier.latest(now)
            if latest is not None:
                out = latest
        load = self._windows[(now, seconds)] = Load.from_row(out)
        return load

    def series(self, name: str, now: float, seconds: float) -> tuple[npt.NDArray[np.float64],
                                                                     npt.NDArray[np.float64]]:
        """(bucket start times, bucket means) of one field over the last `seconds`, from the finest tier
        that spans them: for forecasting and dashboards."""
        if now != self._memo_now:
            self._forget_windows(now)
        kept = self._series.get(seconds)
        if kept is None:  # the buckets' means of every field at once: the forecast asks for each (24 per decision)
            tier = next((t for t in self._tiers if t.span() >= seconds), self._tiers[-1])
            ids, means = tier.bucket_means(now, seconds)
            kept = self._series[seconds] = (ids.astype(np.float64) * tier.seconds, means)
        return kept[0].copy(), kept[1][:, F[name]].copy()

    def minutes(self, name: str, now: float, lookback: float) -> tuple[npt.NDArray[np.float64],
                                                                       npt.NDArray[np.float64]]:
        """The long tier: (bucket start times, per-minute means) of `name` over the last `lookback` seconds.

        Contract (the seasonal forecaster relies on it):
        - `name` is one of scaler/longhistory.py LONG_FIELDS: `finished_rate` (requests/s), `prompt_rate`,
          `generation_rate` (tokens/s), `demand` (running + waiting + upstream requests);
        - the buckets are the ceil(lookback / 60) whole minutes before the minute `now` is in, oldest first,
          every one present (a regular 60 s grid: start times t, t + 60, ...; the current, incomplete
          minute is never returned), so a lookback of 7 days is always 10,080 values;
        - a value is the mean of the model's aggregate over that minute's collections (each weighs the same;
          rates are the replicas' summed counter rates); NaN = no data for that minute (not collected, older
          than the tier's `days`, or not reported); a minute collected with no fresh replica is 0;
        - values carry the encoding's error: at most MAX_RELATIVE_ERROR (0.37%) relative, values below
          1e-5 read as 0, above 1e8 as 1e8;
        - on a restart the minutes before it come from Prometheus (every pod the same) or the pod's own
          snapshot (`--history-dir`), and are NaN until that rebuild has landed (it runs in the
          background, seconds after the model is first seen).
        Raises ValueError for an unknown name or a lookback <= 0. Costs O(lookback): 14 days read in ~0.08 ms
        of CPU (bench/bench_history_long.py)."""
        return self.long.minutes(name, now, lookback)

    def replica_windows(self, now: float, seconds: float, stale_after: float | None = None) -> list[ReplicaWindow]:
        """Each fresh replica of the latest observation, with its ring's means over (now - seconds, now]."""
        obs = self._latest
        if obs is None:
            return []
        bound = self.stale_after if stale_after is None else stale_after
        if now != self._memo_now:
            self._forget_windows(now)
        kept = self._replica_windows.get((now, seconds, bound))
        if kept is not None:
            return list(kept)
        fresh = [s for s in obs.replicas if is_fresh(s, now, bound)]
        if not fresh:
            return []
        empty = np.full((REPLICA_RING, len(RFIELDS)), math.nan)
        rings = np.stack([t.ring if (t := self._replicas.get(s.pod)) is not None else empty for s in fresh])
        ts = rings[:, :, RF["timestamp"]]  # rows never written are NaN and match nothing
        inside = (ts > now - seconds) & (ts <= now)  # ring order: a mean needs none
        vals = rings[:, :, _WINDOW_COLUMNS]  # replica x sample x column
        counted = inside[:, :, None] & ~np.isnan(vals)
        n = counted.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(n > 0, np.where(counted, vals, 0.0).sum(axis=1) / np.maximum(n, 1), math.nan).tolist()
        out = []
        for s, row in zip(fresh, means, strict=True):
            running, generation, ttft_sum, ttft_n, itl_sum, itl_n, waiting = (
                None if math.isnan(v) else v for v in row)
            out.append(ReplicaWindow(s.pod, s.degraded, running, generation, _ratio(ttft_sum, ttft_n),
                                     (ttft_n or 0.0) * seconds, _ratio(itl_sum, itl_n), (itl_n or 0.0) * seconds,
                                     waiting))
        self._replica_windows[(now, seconds, bound)] = tuple(out)
        return out

    def replica_samples(self, pod: str) -> npt.NDArray[np.float64]:
        """The replica's retained samples, oldest first, columns RFIELDS (empty when unknown)."""
        t = self._replicas.get(pod)
        if t is None:
            return np.empty((0, len(RFIELDS)))
        idx = [(t.pos - t.size + i) % REPLICA_RING for i in range(t.size)]
        return t.ring[idx].copy()

    def replica_rates(self, pod: str) -> Rates | None:
        t = self._replicas.get(pod)
        return None if t is None else t.rates

    def nbytes(self) -> int:
        """Bytes held in arrays (tiers and replica rings): the part that grows with models and replicas."""
        return (sum(t.nbytes() for t in self._tiers) + sum(t.ring.nbytes for t in self._replicas.values())
                + self.long.nbytes() + sum(p.nbytes() for p in self._pools.values()))
