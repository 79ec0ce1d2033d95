"""Carry the committed frontier points over a change that moves no result: a speedup, a refactor.

Each entry of docs/data/frontier-points is keyed by a digest of the source its point ran
(simulator/report/frontier_cache.py), so an edit to any module a point runs leaves the store stale for
those points, and re-simulating the fluid traces' points is hours of CPU. A change that computes what the
old source did need not pay that. This script finds every entry that is current for the source at a git
revision (`--from`, default HEAD) and not for the working tree's, re-simulates a seeded sample of them on
the working tree's source (of each trace and policy its dearest point, where a long run or a runaway queue
stresses the change, then others at random within `--budget` CPU seconds, as the entries recorded them),
and only where every one gives the same SLO attainment and GPU-hours, bit for bit, writes each entry again
under the working tree's key: the sampled ones with their new CPU seconds, the others as they were. One
point that differs stops it with nothing written: the change moved results, and `simulator_table.py
--frontier` re-simulates what it moved. The old entries stay (entries are never deleted).

A change that moves some policies on purpose (a fix to one anchor's predictor) names them with `--moved`:
their entries are neither sampled nor carried, and are simulated again by hand or by the frontier. A change
to one backend moves them only on the traces that backend runs: `--moved-in detailed` (or `fluid`) carries
their entries on the other traces like the rest.

    python scripts/carry_points.py [--from REV] [--budget CPU_S] [--workers N] [--moved POLICY,... [--moved-in MODE]]
                                   [--gauges TIMING] [--dry-run]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulator_table import CACHE, CASES, PRESET, SLO, load

from keda_llm.simulator.cluster.engine import GAUGE_TIMINGS
from keda_llm.simulator.control.controllers import ScheduleController
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report import frontier_cache
from keda_llm.simulator.report.frontier import oracle_pods, references, with_seed
from keda_llm.simulator.report.frontier_cache import PointCache, References
from keda_llm.simulator.report.frontier_point import Point, run_point
from keda_llm.simulator.report.summary import summarize
from keda_llm.simulator.run import Backtest, simulate
from keda_llm.simulator.workload.traces import Trace

#: the parts a point's key reads (simulator/report/frontier_cache.py: SHARED_SOURCES and what they import)
PARTS = ("simulator", "scaler", "common", "activator")


@dataclass(frozen=True)
class Entry:
    case: int  # index into CASES
    policy: str
    knob: float  # or the int a default knob was written as
    seed: int
    point: Point  # as the old source's entry holds it


def checkout(rev: str, into: Path) -> Path:
    """The parts of `rev` under `into` (a tree the key's digest reads as it reads the installed parts)."""
    root = Path(__file__).resolve().parent.parent
    tar = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", rev, *PARTS], capture_output=True,
                         check=False)
    if tar.returncode != 0:
        raise SystemExit(f"git archive {rev} failed: {tar.stderr.decode().strip()}; hint: --from takes a commit")
    path = into / "tree.tar"
    path.write_bytes(tar.stdout)
    with tarfile.open(path) as t:
        t.extractall(into, filter="data")
    return into


def key_rule(old_root: Path) -> type[PointCache]:
    """The revision's own PointCache, loaded from its frontier_cache.py: the entries it wrote are keyed by its
    rule of what a point's source is (NOT_A_POINT and the rest), which a change to that rule moves for every
    entry without moving a result. Where the revision's rule is the working tree's, the installed class."""
    old = old_root / "simulator" / "report" / "frontier_cache.py"
    if old.read_bytes() == Path(frontier_cache.__file__).read_bytes():
        return PointCache
    spec = importlib.util.spec_from_file_location("carried_frontier_cache", old)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return cast(type[PointCache], module.PointCache)


def stale_entries(old_root: Path, bt: Backtest) -> tuple[list[Entry], dict[int, tuple[PointCache, PointCache]]]:
    """Every point entry current for the source under `old_root` (keyed by its own rule: key_rule) and missing
    for the working tree's."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for f in sorted((CACHE / "points").glob("*.json")):
        d = json.loads(f.read_text())
        by_trace.setdefault(str(d["trace"]), []).append(d)
    found: dict[Entry, None] = {}  # an entry once, however many files hold its point (older sources' too)
    caches: dict[int, tuple[PointCache, PointCache]] = {}
    for ci, case in enumerate(CASES):
        tr = load(case, False)
        old = key_rule(old_root)(CACHE, tr, bt, sources_root=old_root)
        new = PointCache(CACHE, tr, bt)
        caches[ci] = (old, new)
        for d in by_trace.get(tr.name, []):
            # the knob as written: a default knob may be an int, and the key holds its repr (114, not 114.0)
            policy, knob, seed = str(d["policy"]), d["knob"], int(d["seed"])
            p = old.get(policy, knob, seed)
            if p is not None and new.get(policy, knob, seed) is None:
                found[Entry(ci, policy, knob, seed, p)] = None
    return list(found), caches


def sample(entries: list[Entry], budget: float, seed: int) -> list[Entry]:
    """Each (trace, policy)'s dearest entry, then others at random while their recorded CPU fits `budget`."""
    groups: dict[tuple[int, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.case, e.policy), []).append(e)
    picked = [max(g, key=lambda e: e.point.cpu_s) for g in groups.values()]
    spent = sum(e.point.cpu_s for e in picked)
    rest = [e for e in entries if e not in picked]
    random.Random(seed).shuffle(rest)
    for e in rest:
        if spent + e.point.cpu_s > budget:
            continue
        picked.append(e)
        spent += e.point.cpu_s
    return picked


_TRACES: dict[int, Trace] = {}


def _simulate(e: Entry, bt: Backtest) -> Point:
    tr = _TRACES.get(e.case)
    if tr is None:
        tr = _TRACES[e.case] = load(CASES[e.case], False)
    return run_point(tr, with_seed(bt, e.seed), e.policy, e.knob)


def _references(case: int, bt: Backtest, was: References) -> References | None:
    """The trace's references on this source, or None where they moved. The plan from scratch, static and the
    bound are computed again; where the stored oracle was planned on from a policy's schedule
    (frontier.oracle_from_points) the plan from scratch must give its `scratch_gpu_hours`, and its own schedule,
    replayed, its SLO attainment and GPU-hours: what is carried is the stored entry."""
    tr = load(CASES[case], False)
    fresh = references(tr, bt)
    pods = oracle_pods(was)
    if pods is None:  # the plan from scratch stood, whatever starts were tried (those are carried too)
        return was if _same_refs(fresh, replace(was, oracle_starts=(), oracle_settled=False)) else None
    scratch = replace(was, oracle_attainment=fresh.oracle_attainment, oracle_gpu_hours=was.scratch_gpu_hours,
                      oracle_status=fresh.oracle_status, oracle_pods=(), oracle_settled=False, scratch_gpu_hours=0.0,
                      oracle_starts=())
    if not _same_refs(fresh, scratch):
        return None
    s = summarize(simulate(tr, bt, ScheduleController("oracle", pods), bt.resolved_mode(tr)), SLO)
    same = s.slo_attainment == was.oracle_attainment and s.gpu_hours == was.oracle_gpu_hours
    return was if same else None


def _same_refs(a: References, b: References) -> bool:
    return {**a.__dict__, "cpu_s": 0.0} == {**b.__dict__, "cpu_s": 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="rev", default="HEAD", help="the revision whose entries to carry (default HEAD)")
    ap.add_argument("--budget", type=float, default=1800.0,
                    help="CPU seconds of re-simulation, as the entries recorded them (default 1800); each "
                         "trace and policy's dearest point is re-simulated whatever the budget")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="of the sample")
    ap.add_argument("--moved", default="", help="policies this change moves on purpose, comma-separated: their "
                                                "entries are left out (neither sampled nor carried)")
    ap.add_argument("--moved-in", choices=("detailed", "fluid"), default=None,
                    help="the --moved policies moved only on the traces run in this mode (a change to one "
                         "backend): on the others they are carried like the rest")
    ap.add_argument("--dry-run", action="store_true", help="say what would be re-simulated and carried")
    ap.add_argument("--gauges", default="leading", choices=GAUGE_TIMINGS,
                    help="the gauge timing whose entries to carry (SimConfig.gauges; the store keys each apart) "
                         "[leading]")
    args = ap.parse_args()
    moved = {p for p in args.moved.split(",") if p}
    bt = Backtest(get_preset(PRESET), cold_start="typical", slo=SLO, gauges=args.gauges)
    with tempfile.TemporaryDirectory() as tmp:
        entries, caches = stale_entries(checkout(args.rev, Path(tmp)), bt)
    modes = {ci: bt.resolved_mode(load(CASES[ci], False)) for ci in {e.case for e in entries}} if args.moved_in else {}

    def is_moved(e: Entry) -> bool:
        return e.policy in moved and (args.moved_in is None or modes[e.case] == args.moved_in)

    left = [e for e in entries if is_moved(e)]
    entries = [e for e in entries if not is_moved(e)]
    if left:
        print(f"{len(left)} entries of {', '.join(sorted(moved))} left out (--moved)", flush=True)
    if not entries:
        print("nothing to carry: no entry is current for that revision's source and stale for this one")
        return
    picked = sample(entries, args.budget, args.seed)
    print(f"{len(entries)} entries to carry; re-simulating {len(picked)} "
          f"({sum(e.point.cpu_s for e in picked):.0f} CPU s as recorded)", flush=True)
    if args.dry_run:
        return
    t0 = time.time()
    again: dict[Entry, Point] = {}
    refs: dict[int, References] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        # a trace's references (the oracle, static, the bound) are carried only re-simulated: they are cheap
        carry_refs = [ci for ci, (old, new) in caches.items()
                      if old.get_references(bt.oracle_target) is not None
                      and new.get_references(bt.oracle_target) is None]
        # the revision's References may be its own class (key_rule): carried as this source's
        rfuts = {ci: pool.submit(_references, ci, bt, References(**asdict(was))) for ci in carry_refs
                 if (was := caches[ci][0].get_references(bt.oracle_target)) is not None}
        futs = {e: pool.submit(_simulate, e, bt) for e in picked}
        for ci, rf in rfuts.items():
            r = rf.result()
            print(f"  {CASES[ci].trace} references: {'same' if r is not None else 'DIFFER'}", flush=True)
            if r is None:
                pool.shutdown(cancel_futures=True)
                raise SystemExit(f"{CASES[ci].trace}'s references moved: this change is not result-neutral; "
                                 "nothing carried. hint: scripts/simulator_table.py --frontier re-simulates them")
            refs[ci] = r
        for e, f in futs.items():
            p = f.result()
            same = p.attainment == e.point.attainment and p.gpu_hours == e.point.gpu_hours
            print(f"  {CASES[e.case].trace} {e.policy}@{e.knob:g} seed {e.seed}: {p.attainment!r} {p.gpu_hours!r} "
                  f"{'same' if same else f'DIFFERS (was {e.point.attainment!r} {e.point.gpu_hours!r})'}; "
                  f"{p.cpu_s:.1f} CPU s (was {e.point.cpu_s:.1f})", flush=True)
            if not same:
                pool.shutdown(cancel_futures=True)
                raise SystemExit("a point moved: this change is not result-neutral; nothing carried. "
                                 "hint: scripts/simulator_table.py --frontier re-simulates the stale points")
            again[e] = p
    for e in entries:
        p = again.get(e, e.point)
        caches[e.case][1].put(e.policy, Point(e.knob, p.attainment, p.gpu_hours, p.cpu_s), e.seed)
    for ci, r in refs.items():
        caches[ci][1].put_references(bt.oracle_target, r)
    print(f"carried {len(entries)} entries ({len(again)} re-simulated, all the same) in {time.time() - t0:.0f} s "
          "wall", flush=True)


if __name__ == "__main__":
    main()
