"""Review repros: the per-pod long history snapshot (scaler/restore.py save, scaler/snapshot.py)."""

from __future__ import annotations

from pathlib import Path

from keda_llm.scaler import snapshot
from keda_llm.scaler.longhistory import LongTier
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.restore import LongHistoryRestorer, StoreRef
from keda_llm.scaler.service import HistoryStore

DAY = 86_400.0
T0 = 1_800_000_000.0 - 1_800_000_000.0 % 60
SRC = "exporters-static|10.0.0.5:9400|"


def _day_of_history(end: float) -> LongTier:
    """A tier with one day of demand = 5 up to `end`."""
    tier = LongTier(days=14)
    t = end - DAY
    while t < end:
        tier.add(t, (1.0, 10.0, 10.0, 5.0))
        t += 20.0
    return tier


def _saved(directory: Path, model: str, end: float) -> None:
    minutes, words = _day_of_history(end).export()
    snapshot.save(directory, [snapshot.Entry(SRC, "ns", model, int(minutes[-1]), words)])


def _known_minutes(directory: Path, model: str) -> int:
    e = snapshot.load(directory)[(SRC, "ns", model)]
    return int((e.words != 0).any(axis=1).sum())


def test_shutdown_before_the_restorer_reached_a_model_keeps_its_saved_history(tmp_path: Path) -> None:
    """A model in the store whose snapshot entry was not merged yet (the pod is stopped within the
    restorer's first interval, or while the restorer is busy with a slow Prometheus source): `save`
    writes the model's live minutes and drops its pending entry, so its 14 days on disk are gone."""
    _saved(tmp_path, "m", T0)
    assert _known_minutes(tmp_path, "m") >= 1439  # a day on disk
    now = T0 + 600.0  # restarted 10 minutes later
    store = HistoryStore(long_days=14)
    restorer = LongHistoryRestorer(lambda: [StoreRef(SRC, "", store)], store.lock, clock=lambda: now,
                                   history_dir=tmp_path)
    # the first collection saw the model; the restorer's next step (5 s later) has not run; SIGTERM:
    for k in range(3):
        store.ingest(Observation("ns", "m", now + 20.0 * k, (ReplicaSample("a", now + 20.0 * k, running=1.0,
                                                                             waiting=0.0),)))
    restorer.stop()  # Sources.stop(): restorer.stop(), loop stop, then save
    restorer.save()
    assert _known_minutes(tmp_path, "m") >= 1439, "the day of history read at start was dropped by the save"


def test_entries_older_than_the_long_tier_span_are_not_carried_forever(tmp_path: Path) -> None:
    """A model no longer collected is kept in every later snapshot (and in memory, 121 KB each) though
    none of its minutes can land anywhere any more (all older than the 14-day span)."""
    _saved(tmp_path, "gone", T0)
    now = T0 + 30 * DAY  # a month later: every minute of "gone" is past the 14 days
    store = HistoryStore(long_days=14)
    restorer = LongHistoryRestorer(lambda: [StoreRef(SRC, "", store)], store.lock, clock=lambda: now,
                                   history_dir=tmp_path)
    restorer.step()
    restorer.save()
    kept = snapshot.load(tmp_path)
    assert (SRC, "ns", "gone") not in kept, "an entry wholly older than 14 days is still re-saved (never expires)"


def test_a_temp_file_a_killed_save_left_is_removed_at_the_next_start(tmp_path: Path) -> None:
    """The pod is SIGKILLed (termination grace over, OOM) while the shutdown save writes: the
    `.long-history-*` temp file (up to 256 MiB) stays in the volume; no start or later save removes it,
    so each such kill leaks another one until the volume is full and no snapshot can be written."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = f"""
import time, numpy as np
from pathlib import Path
from keda_llm.scaler import snapshot
def entries():
    for i in range(100):
        yield snapshot.Entry("s", "ns", f"m{{i}}", 10_000_000, np.ones((20160, 3), np.uint16))
        time.sleep(0.05)
snapshot.save(Path({str(tmp_path)!r}), entries())
"""
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ))
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.startswith(".long-history-") and p.stat().st_size > 1_000_000
                                             for p in tmp_path.iterdir()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".long-history-")]
    assert leftovers, "the kill should have left the temp file (test setup)"
    hour_ago = time.time() - 2 * 3600.0  # the next start comes later than a save takes: older than an hour
    for p in leftovers:
        os.utime(p, (hour_ago, hour_ago))
    in_progress = tmp_path / ".long-history-another-pod"  # another pod's save under way on the shared volume
    in_progress.write_bytes(b"x")
    # the next pod starts on the same volume and saves normally
    store = HistoryStore(long_days=14)
    restorer = LongHistoryRestorer(lambda: [StoreRef(SRC, "", store)], store.lock, clock=lambda: T0,
                                   history_dir=tmp_path)
    store.ingest(Observation("ns", "m", T0, (ReplicaSample("a", T0, running=1.0, waiting=0.0),)))
    restorer.step()
    restorer.save()
    still = [p for p in leftovers if p.exists()]
    assert not still, f"{[(p.name, p.stat().st_size) for p in still]} left in the history dir for good"
    assert in_progress.exists(), "a save still under way (a temp file younger than an hour) was removed"


def test_two_pods_on_one_history_dir_the_idle_one_does_not_overwrite_the_fresh_history(tmp_path: Path) -> None:
    """Two scaler pods of one Deployment get the same volume (a Deployment's pods share its PVC; RWO
    still lets two pods on one node mount it). KEDA's gRPC connection lands on pod A, which collects the
    model; pod B never sees it and keeps the entry it read at start. B's save replaces A's: the hour A
    collected is gone from the file (and from the history after the next restart). Nothing warns."""
    _saved(tmp_path, "m", T0)
    start = T0 + 60.0
    clock = [start]
    store_a, store_b = HistoryStore(long_days=14), HistoryStore(long_days=14)
    pod_a = LongHistoryRestorer(lambda: [StoreRef(SRC, "", store_a)], store_a.lock, clock=lambda: clock[0],
                                history_dir=tmp_path)
    pod_b = LongHistoryRestorer(lambda: [StoreRef(SRC, "", store_b)], store_b.lock, clock=lambda: clock[0],
                                history_dir=tmp_path)
    for k in range(180):  # pod A collects the model for an hour
        t = start + 20.0 * k
        store_a.ingest(Observation("ns", "m", t, (ReplicaSample("a", t, running=3.0, waiting=0.0),)))
        clock[0] = t
        pod_a.step()
        pod_b.step()
    pod_a.save()
    pod_b.save()  # a moment later: the other pod's periodic save (or its shutdown)
    head = snapshot.load(tmp_path)[(SRC, "ns", "m")].head
    assert head >= int(clock[0] // 60) - 1, (
        f"the file's newest minute for m is {int(clock[0] // 60) - head} minutes old: pod B's stale copy won")


def test_through_sources_a_sigterm_before_the_next_restore_step_keeps_the_saved_history(tmp_path: Path) -> None:
    """The same loss through the assembled Sources and its real shutdown path (Sources.stop: restorer.stop,
    loop stop, save): the first collection put the model in the store, the restorer's next step (every
    history_restore_s = 5 s) had not run yet when the pod was told to stop."""
    import time

    from prometheus_server import BodyServer

    from keda_llm.scaler.assembly import ScalerSettings, Sources
    from keda_llm.scaler.config import parse_metadata

    exporter = BodyServer("")  # an exporter with no engine: the watched model is seen with no replica
    try:
        settings = ScalerSettings(exporters=(exporter.address,), history_dir=str(tmp_path))
        sources = Sources(settings, background=False)
        cfg = parse_metadata({"model": "m"})
        (source_name,) = {"|".join(sources.key(cfg))}
        now = time.time()
        minutes, words = _day_of_history(now - 120.0).export()
        snapshot.save(tmp_path, [snapshot.Entry(source_name, "ns", "m", int(minutes[-1]), words)])
        sources = Sources(settings, background=False)  # the restarted pod reads the file
        sources.watch("ns", cfg)
        source, _ = sources.open(cfg)
        source.collect_once()  # the first collection: the model is in the store
        assert sources.history("ns", cfg) is not None
        sources.stop()  # SIGTERM
        e = snapshot.load(tmp_path)[(source_name, "ns", "m")]
        known = int((e.words != 0).any(axis=1).sum())
        assert known >= 1400, f"{known} minutes left of the day on disk"
    finally:
        exporter.close()
