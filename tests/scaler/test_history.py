"""Per-model history (scaler/history.py): aggregation, counter rates, tiers, staleness, bounds."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest

from keda_llm.scaler.history import FIELDS, REPLICA_RING, Load, ModelHistory, Rates, counter_rate
from keda_llm.scaler.model import Observation, ReplicaSample


def obs(at: float, *replicas: ReplicaSample, upstream: float | None = None) -> Observation:
    return Observation("ns", "m", at, replicas, upstream)


def one(at: float, running: float, **kw: float) -> Observation:
    return obs(at, ReplicaSample("a", at, running=running, **kw))


def test_counter_rates_and_reset() -> None:
    h = ModelHistory("ns", "m")
    h.ingest(obs(10.0, ReplicaSample("a", 10.0, prompt_tokens_total=1000, generation_tokens_total=50,
                                     requests_finished_total=2)))
    assert h.replica_rates("a") == Rates()  # one sample: no rate yet
    h.ingest(obs(12.0, ReplicaSample("a", 12.0, prompt_tokens_total=3000, generation_tokens_total=250,
                                     requests_finished_total=6)))
    assert h.replica_rates("a") == Rates(1000.0, 100.0, 2.0)
    # The same scrape again (the collector polled faster than the exporter scraped): nothing new.
    h.ingest(obs(13.0, ReplicaSample("a", 12.0, prompt_tokens_total=3000, generation_tokens_total=250,
                                     requests_finished_total=6)))
    assert h.replica_rates("a") == Rates(1000.0, 100.0, 2.0)
    assert len(h.replica_samples("a")) == 2
    # Engine restarted: counters went down. That interval gives no rates (when the restart fell in it is
    # unknown); the next one counts from the restarted counters.
    h.ingest(obs(14.0, ReplicaSample("a", 14.0, prompt_tokens_total=500, generation_tokens_total=20,
                                     requests_finished_total=1)))
    assert h.replica_rates("a") == Rates()
    h.ingest(obs(16.0, ReplicaSample("a", 16.0, prompt_tokens_total=1500, generation_tokens_total=220,
                                     requests_finished_total=5)))
    assert h.replica_rates("a") == Rates(500.0, 100.0, 2.0)
    assert counter_rate(None, 5.0, 1.0) is None and counter_rate(1.0, 5.0, 0.0) is None
    assert counter_rate(5.0, 4.0, 1.0) is None


@pytest.mark.parametrize(("why", "later"), [
    # a reading published late, its stamp after a newer one's: a dip of 50 tokens
    ("a late reading", {"prompt_tokens_total": 999_950.0, "ttft_sum": 400.0, "ttft_count": 1000.0}),
    # two pods trading names: this name now reads the other pod's counters
    ("two pods trading names", {"prompt_tokens_total": 5_000.0, "ttft_sum": 2.0, "ttft_count": 10.0}),
    # an early restart: _sum came down, _count (small still) did not
    ("a _sum reset without its _count", {"prompt_tokens_total": 1_000_100.0, "ttft_sum": 0.5, "ttft_count": 1002.0}),
])
def test_a_counter_going_down_is_never_a_spike(why: str, later: dict[str, float]) -> None:
    """Found by a review: counted from zero, as Prometheus' rate() does, these read as 1,000,150 and 503,100
    tokens a second, and a mean TTFT of 1.5 s for a true 0.25 s."""
    h = ModelHistory("ns", "m")
    h.ingest(obs(10.0, ReplicaSample("a", 10.0, prompt_tokens_total=999_000.0, ttft_sum=399.0, ttft_count=998.0)))
    h.ingest(obs(11.0, ReplicaSample("a", 11.0, prompt_tokens_total=1_000_000.0, ttft_sum=400.0, ttft_count=1000.0)))
    h.ingest(obs(12.0, ReplicaSample("a", 12.0, **later)))
    assert h.replica_rates("a") == Rates(), why
    load = h.window(12.0, 1.0)
    assert load.prompt_rate is None or load.prompt_rate <= 1000.0, why
    assert load.mean_ttft is None or load.mean_ttft <= 0.5, why


def test_a_mean_latency_counts_only_replicas_that_report_both_sum_and_count() -> None:
    """A replica with a histogram's _count but no _sum (NaN) added requests to the mean's denominator only:
    a true 0.4 s read as 0.2 s, and the latency term under-asked."""
    h = ModelHistory("ns", "m")
    for t, n in ((10.0, 0.0), (20.0, 10.0)):
        h.ingest(obs(t, ReplicaSample("a", t, ttft_sum=0.4 * n, ttft_count=n),
                     ReplicaSample("b", t, ttft_sum=math.nan, ttft_count=n)))
    assert h.window(20.0, 1.0).mean_ttft == pytest.approx(0.4)


def test_rates_summed_over_replicas_in_the_window() -> None:
    h = ModelHistory("ns", "m")
    for t, pa, pb in ((10.0, 0.0, 0.0), (11.0, 300.0, 100.0)):
        h.ingest(obs(t, ReplicaSample("a", t, prompt_tokens_total=pa, requests_finished_total=pa / 100),
                     ReplicaSample("b", t, prompt_tokens_total=pb, requests_finished_total=pb / 50)))
    load = h.window(11.0, 1.0)
    assert (load.prompt_rate, load.finished_rate) == (400.0, 5.0)  # 300 + 100 tokens/s, 3 + 2 requests/s


def test_nan_and_infinite_values_are_not_reported() -> None:
    h = ModelHistory("ns", "m")
    h.ingest(obs(5.0, ReplicaSample("a", 5.0, running=math.nan, waiting=2.0, kv_usage_ratio=math.inf,
                                    kv_capacity_tokens=1000.0),
                 ReplicaSample("b", 5.0, running=3.0, waiting=math.nan)))
    load = h.window(5.0, 6.0)
    assert (load.replicas, load.running, load.waiting, load.kv_used, load.kv_capacity) == (2.0, 3.0, 2.0, None, None)


def test_window_skips_unsampled_buckets() -> None:
    """Collection every 5 s: the 60 s mean of a steady 10 is 10, not 10 x 12/60."""
    h = ModelHistory("ns", "m")
    for t in range(5, 121, 5):
        h.ingest(one(float(t), 10.0))
    assert h.window(120.0, 60.0).running == 10.0


def test_window_is_a_time_average_over_buckets() -> None:
    """Two samples in one second weigh as that second, once: (avg(2, 4) + 9) / 2."""
    h = ModelHistory("ns", "m")
    h.ingest(one(10.0, 2.0))
    h.ingest(one(10.5, 4.0))
    h.ingest(one(11.0, 9.0))
    assert h.window(11.0, 6.0).running == 6.0


def test_window_holds_the_last_bucket_when_collection_is_slower_than_the_window() -> None:
    h = ModelHistory("ns", "m")
    h.ingest(one(10.0, 4.0))
    h.ingest(one(20.0, 8.0))
    assert h.window(25.0, 6.0).running == 8.0  # (19, 25] holds t=20
    assert h.window(29.0, 6.0).running == 8.0  # (23, 29] is empty: the newest bucket before it
    assert h.window(5.0, 6.0) == Load()  # nothing at or before t=5


def test_downsampled_tiers() -> None:
    h = ModelHistory("ns", "m", stale_after=30.0)
    for t in range(1, 1201):
        h.ingest(one(float(t), float(t)))
    # 60 s: the 1 s tier, exact: mean of 1141..1200
    assert h.window(1200.0, 60.0).running == 1170.5
    # 10 min: the 10 s tier, buckets 61..120 (t = 610..1209); bucket b holds 10b..10b+9, bucket 120 only t=1200:
    # (sum over b=61..119 of (10b + 4.5) + 1200) / 60
    assert h.window(1200.0, 600.0).running == pytest.approx((10 * 5310 + 59 * 4.5 + 1200) / 60, rel=1e-12)
    # 1 h: the 60 s tier; buckets 0..20: bucket 0 holds 1..59 (mean 30), bucket k holds 60k..60k+59, 20 only 1200
    expected = (30.0 + sum(60 * k + 29.5 for k in range(1, 20)) + 1200.0) / 21
    assert h.window(1200.0, 3600.0).running == pytest.approx(expected, rel=1e-12)
    times, values = h.series("running", 1200.0, 3600.0)
    assert len(times) == 21 and times[0] == 0.0 and times[-1] == 1200.0 and values[-1] == 1200.0


def test_history_is_bounded() -> None:
    h = ModelHistory("ns", "m")
    for t in range(1, 601):
        h.ingest(one(float(t), 1.0))
    size = h.nbytes()
    for t in range(601, 7201):
        h.ingest(one(float(t), 1.0))
    assert h.nbytes() == size
    times, _ = h.series("running", 7200.0, 7200.0)
    assert len(times) == 75 and times[0] == (120 - 74) * 60.0  # 75 one-minute buckets: 75 min back
    assert len(h.replica_samples("a")) == REPLICA_RING


def test_fresh_loading_stale_classification() -> None:
    h = ModelHistory("ns", "m", stale_after=30.0)
    h.ingest(obs(100.0, ReplicaSample("up", 100.0, running=1.0), ReplicaSample("gone", 100.0, running=5.0),
                 ReplicaSample("new", 0.0, up=False)))
    h.ingest(obs(140.0, ReplicaSample("up", 140.0, running=2.0), ReplicaSample("gone", 100.0, running=5.0),
                 ReplicaSample("new", 0.0, up=False), ReplicaSample("crashed", 139.0, up=False)))
    snap = h.snapshot(140.0)
    assert snap is not None
    # "gone" was up at 100 and is 40 s old: stale. "new" never came up: loading. "crashed" was never seen up
    # by this history either: loading (a restart looks the same as a first start).
    assert (snap.fresh, snap.stale, snap.loading) == (1, 1, 2)
    assert snap.latest.running == 2.0  # the stale replica's 5 no longer counts
    assert snap.data_age == 0.0
    # Judged later, with no new observation: "up" is 40 s old too.
    later = h.snapshot(170.5)
    assert later is not None and (later.fresh, later.stale, later.data_age) == (0, 2, math.inf)
    assert h.snapshot(1.0) is not None and ModelHistory("ns", "m").snapshot(1.0) is None


def test_replicas_no_longer_listed_are_forgotten() -> None:
    h = ModelHistory("ns", "m", stale_after=30.0)
    h.ingest(obs(0.0, ReplicaSample("a", 0.0, running=1.0), ReplicaSample("b", 0.0, running=1.0)))
    h.ingest(obs(120.0, ReplicaSample("a", 120.0, running=1.0)))
    assert len(h.replica_samples("b")) == 1  # kept for 2 x max(staleAfter, 60 s)
    h.ingest(obs(120.5, ReplicaSample("a", 120.5, running=1.0)))
    assert len(h.replica_samples("b")) == 0


def test_late_observation_fills_its_bucket_only() -> None:
    h = ModelHistory("ns", "m")
    h.ingest(one(10.0, 4.0))
    h.ingest(one(12.0, 8.0))
    h.ingest(one(11.0, 6.0))
    assert h.last_at == 12.0
    assert h.window(12.0, 3.0).running == 6.0  # (4 + 6 + 8) / 3
    snap = h.snapshot(12.0)
    assert snap is not None and snap.latest.running == 8.0


def test_last_demand_and_lifetime_prompt_size() -> None:
    h = ModelHistory("ns", "m")
    h.ingest(one(1.0, 2.0, prompt_tokens_total=6000.0, requests_finished_total=20.0))
    h.ingest(one(2.0, 0.0, prompt_tokens_total=6000.0, requests_finished_total=20.0))
    assert h.last_demand_at == 1.0
    h.ingest(obs(3.0, upstream=2.0))
    assert h.last_demand_at == 3.0
    h.ingest(obs(4.0, upstream=0.0))
    assert h.last_demand_at == 3.0
    h2 = ModelHistory("ns", "m")
    h2.ingest(one(1.0, 2.0, prompt_tokens_total=6000.0, requests_finished_total=20.0, startup_seconds=95.0))
    snap = h2.snapshot(1.0)
    assert snap is not None and snap.lifetime_prompt_per_request == 300.0 and snap.max_startup_seconds == 95.0


def test_load_row_roundtrip() -> None:
    load = Load(replicas=2.0, running=3.0, upstream=1.0)
    row = load.row()
    assert np.isnan(row).sum() == len(row) - 3
    assert Load.from_row(row) == load


def test_load_fields_are_the_series_columns() -> None:
    assert tuple(f.name for f in dataclasses.fields(Load)) == FIELDS


def test_windowed_mean_latency_is_a_ratio_of_sums_over_replicas_with_resets() -> None:
    h = ModelHistory("ns", "m")
    # a: 5 first tokens at 2 s each, 100 gaps of 50 ms in 10 s; b: 10 at 0.2 s, 100 gaps of 10 ms.
    for t, a_tt, a_n, a_it, b_tt, b_n, b_it in ((10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
                                                (20.0, 10.0, 5.0, 5.0, 2.0, 10.0, 1.0)):
        h.ingest(obs(t, ReplicaSample("a", t, ttft_sum=a_tt, ttft_count=a_n, itl_sum=a_it, itl_count=a_n * 20),
                     ReplicaSample("b", t, ttft_sum=b_tt, ttft_count=b_n, itl_sum=b_it, itl_count=b_n * 10)))
    assert h.replica_rates("a") == Rates(None, None, None, 1.0, 0.5, 0.5, 10.0)
    load = h.window(20.0, 1.0)
    # (10 + 2) s of TTFT over (5 + 10) requests = 0.8 s (the mean of the two means would be 1.1 s).
    assert load.mean_ttft == pytest.approx(0.8)
    assert load.mean_itl == pytest.approx(0.03)  # (5 + 1) s over (100 + 100) gaps
    # a restarts: its interval gives nothing (no spike from counters read from zero); b adds 2 s over 10
    # requests; the next interval counts a again, from its restarted counters.
    h.ingest(obs(30.0, ReplicaSample("a", 30.0, ttft_sum=3.0, ttft_count=1.0),
                 ReplicaSample("b", 30.0, ttft_sum=4.0, ttft_count=20.0)))
    assert h.window(30.0, 1.0).mean_ttft == pytest.approx(2.0 / 10.0)
    assert h.window(30.0, 1.0).mean_itl is None  # nobody reported the ITL histogram this time
    h.ingest(obs(40.0, ReplicaSample("a", 40.0, ttft_sum=7.0, ttft_count=3.0),
                 ReplicaSample("b", 40.0, ttft_sum=6.0, ttft_count=30.0)))
    assert h.window(40.0, 1.0).mean_ttft == pytest.approx((4.0 + 2.0) / (2.0 + 10.0))


def test_no_latency_histograms_no_mean() -> None:
    h = ModelHistory("ns", "m")
    for t in (1.0, 2.0):
        h.ingest(one(t, 3.0))
    assert (h.window(2.0, 6.0).mean_ttft, h.window(2.0, 6.0).mean_itl) == (None, None)


def _fresh(h: ModelHistory) -> ModelHistory:
    """The same history read without its kept answers (what every read computed before they were kept)."""
    h._forget_windows(math.nan)
    h._prefill_rate = None
    h._latest_row = None
    return h


def test_kept_window_answers_follow_every_ingest_and_every_now() -> None:
    """A decision reads the same windows several times, so the history keeps its answers for one `now`
    until the next ingest. A kept answer must never outlive the data it was read from."""
    h = ModelHistory("ns", "m")
    for t in range(1, 31):
        h.ingest(obs(float(t), ReplicaSample("a", float(t), running=10.0, waiting=float(t % 3), prompt_tokens_total=
                                             100.0 * t * t, ttft_sum=0.5 * t, ttft_count=float(t))))
    first = h.window(30.0, 10.0)
    assert h.window(30.0, 10.0) is first  # kept
    assert h.window(30.0, 5.0).running == 10.0 and h.window(30.0, 5.0) is not first  # another window, its own
    h.ingest(obs(31.0, ReplicaSample("a", 31.0, running=120.0, waiting=4.0)))
    assert h.window(31.0, 10.0).running == pytest.approx((9 * 10.0 + 120.0) / 10)  # the ingest is seen
    rw = h.replica_windows(31.0, 5.0)
    rw.clear()  # the caller's list is its own
    assert [w.pod for w in h.replica_windows(31.0, 5.0)] == ["a"]
    assert h.replica_windows(31.0, 5.0)[0].running == pytest.approx((10.0 * 4 + 120.0) / 5)
    before = h.replica_windows(31.0, 5.0, stale_after=0.5)
    assert before == h.replica_windows(31.0, 5.0)  # both fresh at 31.0: the same means, kept apart
    assert h.replica_windows(32.0, 5.0, stale_after=0.5) == []  # stale at 32.0 under that bound
    assert h.window(30.0, 10.0).running == 10.0  # an earlier now: read again, not the kept 31.0 answer
    # a later now with no ingest between (a model no longer collected): read at that now
    assert h.window(100.0, 10.0).running == 120.0  # no bucket in the window: the newest before it
    # the same now again after an ingest (a decision at 40.0, then the collection of 35.0, then another)
    assert h.window(40.0, 10.0).running == 120.0 and h.replica_windows(40.0, 10.0)[0].running == 120.0
    h.ingest(obs(35.0, ReplicaSample("a", 35.0, running=20.0)))
    assert h.window(40.0, 10.0).running == 70.0 and h.replica_windows(40.0, 10.0)[0].running == 70.0  # 120, 20
    queued = [100.0 * (2 * t - 1) for t in range(2, 31) if t % 3]  # prompt tokens/s of the samples with a queue
    h.ingest(obs(36.0, ReplicaSample("a", 36.0, running=20.0, waiting=5.0, prompt_tokens_total=1e6)))
    assert h.saturated_prefill_rate() == statistics.median(queued)  # no counter before 36.0: no rate there
    h.ingest(obs(37.0, ReplicaSample("a", 37.0, running=20.0, waiting=5.0, prompt_tokens_total=1e6 + 8000)))
    assert h.saturated_prefill_rate() == statistics.median([*queued, 8000.0])  # seen after the ingest


def test_kept_answers_stay_bounded_when_collection_stops() -> None:
    """Decisions keep coming at new `now`s while nothing is ingested (a model at zero): answers are kept
    for one `now` at a time."""
    h = ModelHistory("ns", "m")
    h.ingest(one(1.0, 3.0))
    for t in range(2, 5000):
        h.window(float(t), 60.0)
        h.window(float(t), 10.0)
        h.replica_windows(float(t), 60.0)
    assert len(h._windows) <= 2 and len(h._replica_windows) <= 1


def test_kept_answers_are_the_answers_read_afresh() -> None:
    """Seeded: random collections (replicas coming and going, gaps, late and repeated scrapes, NaN) and
    reads at random `now`s and windows, each answer against the same read on a history that kept nothing."""
    rng = np.random.default_rng(11)
    h = ModelHistory("ns", "m")
    t = 0.0
    for _ in range(600):
        t += float(rng.choice([0.3, 1.0, 2.0, 7.0, 45.0]))
        pods = [p for p in "abcd" if rng.random() < 0.7]
        reps = tuple(ReplicaSample(p, t - float(rng.choice([0.0, 0.0, 15.0, 40.0])), running=float(rng.integers(0, 50)),
                                   waiting=float(rng.choice([0.0, 3.0, math.nan])),
                                   prompt_tokens_total=1000.0 * t + float(rng.integers(0, 100)),
                                   ttft_sum=0.3 * t, ttft_count=t, itl_sum=0.02 * t * 9, itl_count=9 * t)
                     for p in pods)
        h.ingest(obs(t, *reps, upstream=float(rng.integers(0, 5))))
        if rng.random() < 0.1:  # a late collection: into its buckets only, the newest observation stays
            h.ingest(obs(t - 0.2, *(dataclasses.replace(r, running=1.0) for r in reps)))
        for _ in range(3):
            now = t + float(rng.choice([0.0, 0.0, 0.5, 30.0]))
            seconds = float(rng.choice([6.0, 60.0, 600.0, 3600.0, 7200.0]))
            bound = float(rng.choice([30.0, 30.0, 10.0]))  # the history's own, or a ScaledObject's staleAfter
            kept = (h.window(now, seconds), h.replica_windows(now, seconds), h.saturated_prefill_rate(),
                    h.snapshot(now, bound))
            again = (h.window(now, seconds), h.replica_windows(now, seconds), h.saturated_prefill_rate(),
                     h.snapshot(now, bound))
            afresh = _fresh(h)
            assert kept == again == (afresh.window(now, seconds), afresh.replica_windows(now, seconds),
                                     afresh.saturated_prefill_rate(), afresh.snapshot(now, bound))
