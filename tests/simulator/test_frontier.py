"""Frontier sweeps (simulator.report.frontier) and the docs' frontier block (scripts/simulator_table.py --frontier).

A synthetic 10-minute trace (5 QPS, prompts 500-3000, outputs 300-900 tokens) on 8B/H100 with a 20 ms ITL
target: a replica holds only a small batch within it, so more replicas clearly raise attainment. On it
hpa-kv goes 41% -> 84% -> 94% -> 99.7% as its KV target falls 0.8 -> 0.19, and the concurrency baseline
84% -> 96% -> 99.7% as its per-pod target falls 65 -> 32 (both sweep toward more capacity), while the GPU
utilization baseline meets 99% at its default 80% (99.7%) and misses it at 100% (41.4%), so its sweep goes
toward less capacity and stops after one step. The rules themselves are checked on a stand-in simulation
with hand-derived points (`_fake_point`), as is the points cache.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import load_script

from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report import frontier_cache
from keda_llm.simulator.report.frontier import (
    Frontier,
    Point,
    frontier,
    knob_grid,
    knob_grid_down,
    next_knob,
    over_seeds,
    sweep,
)
from keda_llm.simulator.report.frontier_cache import PointCache, policy_sources, source_digest
from keda_llm.simulator.report.summary import Slo
from keda_llm.simulator.run import Backtest
from keda_llm.simulator.workload.traces import Trace

ROOT = Path(__file__).resolve().parents[2]
UP = ["hpa-kv", "concurrency"]
POLICIES = [*UP, "gpu"]


def _script():  # type: ignore[no-untyped-def]
    return load_script("simulator_table")


@pytest.fixture(scope="module")
def case() -> tuple[Trace, Backtest]:
    rng = np.random.default_rng(1)
    n = 3000
    tr = Trace("synthetic", np.sort(rng.uniform(0, 600, n)), rng.integers(500, 3000, n).astype(np.int32),
               rng.integers(300, 900, n).astype(np.int32))
    return tr, Backtest(get_preset("llama-3.1-8b/h100"), cold_start="fast", slo=Slo(ttft_s=1.0, itl_s=0.02))


@pytest.fixture(scope="module")
def serial(case: tuple[Trace, Backtest]) -> list[Frontier]:
    return sweep(*case, POLICIES, cap_gpu_hours=None, points=6)


def test_knob_grid_is_geometric_from_the_default_toward_capacity() -> None:
    assert knob_grid(0.8, 4) == [0.8, 0.56, 0.392, 0.2744]
    assert knob_grid(70.0, 3, 0.5) == [70.0, 35.0, 17.5]
    with pytest.raises(ValueError):
        knob_grid(1.0, 3, 1.5)


def test_knob_grid_down_divides_and_stops_at_the_bound() -> None:
    assert knob_grid_down(0.05, 4) == [0.05, 0.07143, 0.102, 0.1458]  # 0.05 / 0.7, / 0.49, / 0.343
    assert knob_grid_down(0.5, 6, top=1.0) == [0.5, 0.7143, 1.0]  # 0.5 / 0.49 = 1.02: the bound once
    assert knob_grid_down(1.0, 6, top=1.0) == [1.0]
    with pytest.raises(ValueError, match="above the knob's largest value"):
        knob_grid_down(1.2, 3, top=1.0)


# A stand-in simulation, hand-derivable: `gpu_hours = 1 / knob` (queue: 10 / knob), and attainment a step in the
# knob per policy; the cap (static's GPU-hours) is 3.
#  ours (default half the 20 ms ITL SLO, 0.01, pinned by `half_slo_default`: the sweep's steps, not the shipped
#    fraction, which tests/simulator/test_sim_latency.py holds): 100% up to 0.016, 90% beyond -> down 0.01,
#    0.01429 (meets),
#    0.02041 (misses): `below`; the crossing is bisected five times (each time the point that met costs over
#    2% more than the one that missed): sqrt(0.01429 x 0.02041) = 0.01708 (misses), sqrt(0.01429 x 0.01708)
#    = 0.01562 (meets), 0.01633 (misses), 0.01597 (meets, 62.62 GPU-h against 61.24: 2.3% more), 0.01615
#    (misses), so the cheapest meeting point is 0.01597 at 1 / 0.01597 = 62.62 GPU-h (over the cap: the cap
#    stops only sweeps toward more capacity);
#  hpa-kv (default 0.8): 99% at 0.4 or below, 50% above -> up 0.8, 0.56, 0.392 (meets): `target`; bisected:
#    sqrt(0.392 x 0.56) = 0.4685, 0.4285, 0.4098 and 0.4008 all miss, 0.3964 meets (2.523 GPU-h; 5 points),
#    so 0.3964 at 2.523;
#  aibrix-kpa (default 0.5): 100% everywhere -> down 0.5, 0.7143, 1 (the bound): `bound`, 1.0 GPU-h;
#  queue (default 5): 50% everywhere -> up 5 (2.0 GPU-h), 3.5 (2.857), 2.45 (4.082, over the cap): `cap`;
#  ray-serve (default 2): 100% at 2.0 GPU-h everywhere (its floor) -> down 2, 2.857 (no change): `flat`.
STEP = {"ours": (0.016, 1.0, 0.9, 1.0), "hpa-kv": (0.4, 0.99, 0.5, 1.0), "aibrix-kpa": (9.9, 1.0, 1.0, 1.0),
        "queue": (0.0, 0.5, 0.5, 10.0), "ray-serve": (9.9, 1.0, 1.0, 0.0)}
CALLS: list[tuple[str, float]] = []


def _fake_point(trace: Trace, backtest: Backtest, policy: str, knob: float) -> Point:
    CALLS.append((policy, knob))
    edge, at_or_below, above, scale = STEP[policy]
    return Point(knob, at_or_below if knob <= edge else above, scale / knob if scale else 2.0, 0.5)


FAKE = ["ours", "hpa-kv", "aibrix-kpa", "queue", "ray-serve"]
FAKE_EXPECTED = {"ours": ([0.01, 0.01429, 0.02041, 0.01708, 0.01562, 0.01633, 0.01597, 0.01615], "below", 0.01597),
                 "hpa-kv": ([0.8, 0.56, 0.392, 0.4685, 0.4285, 0.4098, 0.4008, 0.3964], "target", 0.3964),
                 "aibrix-kpa": ([0.5, 0.7143, 1.0], "bound", 1.0), "queue": ([5.0, 3.5, 2.45], "cap", None),
                 "ray-serve": ([2.0, 2.857], "flat", 2.0)}


def _half_slo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ours' default knob at half the stand-in's ITL SLO, the value the hand derivation above starts from."""
    from keda_llm.simulator.report import frontier

    monkeypatch.setattr(frontier, "ITL_TARGET_FRACTION", 0.5)


@pytest.fixture
def half_slo_default(monkeypatch: pytest.MonkeyPatch) -> None:
    _half_slo(monkeypatch)


def _check_fake(fronts: list[Frontier]) -> None:
    assert [f.policy for f in fronts] == FAKE
    for f in fronts:
        knobs, stop, reached = FAKE_EXPECTED[f.policy]
        assert [p.knob for p in f.points] == knobs and f.stop == stop, f
        assert (f.reached.knob if f.reached else None) == reached, f
    by = {f.policy: f for f in fronts}
    assert by["ours"].cost() == "62.62 GPU-h" and by["hpa-kv"].cost() == "2.52 GPU-h"
    assert by["ours"].coarse == 3 and by["aibrix-kpa"].coarse == 3 and by["ray-serve"].coarse == 2
    assert by["queue"].cost() == "never (best 50.0%)"


@pytest.mark.usefixtures("half_slo_default")
def test_sweep_both_directions_on_a_stand_in(case: tuple[Trace, Backtest]) -> None:
    _check_fake(sweep(*case, FAKE, cap_gpu_hours=3.0, points=6, run=_fake_point))


def test_next_knob_is_a_function_of_the_policy_s_own_points() -> None:
    def nk(*ka: tuple[float, float]) -> float | None:
        done = [Point(k, a, 1 / k, 0.0) for k, a in ka]
        return next_knob(done, target=0.99, cap_gpu_hours=None, points=4, ratio=0.7, top=None)

    assert nk((0.05, 1.0)) == 0.07143  # the default meets 99%: toward less capacity
    assert nk((0.05, 1.0), (0.07143, 1.0)) == 0.102
    assert nk((0.05, 1.0), (0.07143, 0.9)) is None  # the cheaper point missed it
    assert nk((0.05, 0.9)) == 0.035  # the default misses: toward more capacity
    assert nk((0.05, 0.9), (0.035, 0.995)) is None
    assert nk((0.05, 1.0), (0.07143, 1.0), (0.102, 1.0), (0.1458, 1.0)) is None  # `points` reached
    flat = [Point(0.05, 1.0, 3.0, 0.0), Point(0.07143, 1.0, 3.0, 0.0)]  # a step that changed nothing
    assert next_knob(flat, target=0.99, cap_gpu_hours=None, points=4, ratio=0.7, top=None) is None
    assert next_knob([Point(0.05, 0.5, 3.0, 0.0), Point(0.035, 0.5, 3.0, 0.0)], target=0.99, cap_gpu_hours=None,
                     points=4, ratio=0.7, top=None) == 0.0245  # toward more capacity a flat step goes on
    with pytest.raises(ValueError, match="starts at the policy's default"):
        nk()


def test_the_crossing_is_bisected_in_log_space() -> None:
    def nk(*ka: tuple[float, float], refine: int = 2) -> float | None:
        done = [Point(k, a, 1 / k, 0.0) for k, a in ka]
        return next_knob(done, target=0.99, cap_gpu_hours=None, points=4, ratio=0.7, top=None, refine=refine)

    # toward less capacity: 0.07143 missed after 0.05 met -> sqrt(0.05 x 0.07143) = 0.05976
    assert nk((0.05, 1.0), (0.07143, 0.9)) == 0.05976
    assert nk((0.05, 1.0), (0.07143, 0.9), refine=0) is None  # no refinement asked
    # it met at 0.05976: the next halves [0.05976, 0.07143] -> 0.06533; missed: [0.05, 0.05976] -> 0.05466
    assert nk((0.05, 1.0), (0.07143, 0.9), (0.05976, 0.995)) == 0.06533
    assert nk((0.05, 1.0), (0.07143, 0.9), (0.05976, 0.9)) == 0.05466
    # two done; the met point costs 1 / 0.05466 = 18.3 against the miss's 16.7 (over 2% more): a third
    assert nk((0.05, 1.0), (0.07143, 0.9), (0.05976, 0.9), (0.05466, 1.0)) == 0.05715
    # toward more capacity: met at 0.035 after 0.05 missed -> between them
    assert nk((0.05, 0.9), (0.035, 0.995)) == 0.04183
    # no crossing: a sweep that ran out of points or hit the cap is not refined
    assert nk((0.05, 0.5), (0.035, 0.5), (0.0245, 0.5), (0.01715, 0.5)) is None
    assert next_knob([Point(0.05, 0.5, 9.0, 0.0)], target=0.99, cap_gpu_hours=3.0, points=4, ratio=0.7,
                     top=None, refine=2) is None


def test_two_more_bisections_while_the_point_that_met_costs_over_2_percent_more() -> None:
    def nk(*kag: tuple[float, float, float], refine: int = 3) -> float | None:
        done = [Point(k, a, g, 0.0) for k, a, g in kag]
        return next_knob(done, target=0.99, cap_gpu_hours=None, points=4, ratio=0.7, top=None, refine=refine)

    # ours on azure2023-conv over three seeds: after three bisections the met point costs 6.63, the missed one
    # 5.68: a cheaper point may lie between them, so a fourth (which met at 5.82, 2.5% over 5.68) and a fifth
    walk = ((0.05, 0.999, 7.39), (0.07143, 0.963, 5.26))
    three = (*walk, (0.05976, 0.98, 5.62), (0.05466, 0.999, 6.63), (0.05715, 0.984, 5.68))
    assert nk(*three) == 0.05589
    assert nk(*three, (0.05589, 0.998, 5.82)) == 0.05652
    assert nk(*three, (0.05589, 0.998, 5.82), (0.05652, 0.984, 5.68)) is None  # five: the most
    assert nk(*three, (0.05589, 0.998, 5.78)) is None  # within 2% (5.78 against 5.68): done after four
    # within the tolerance after three: no more
    assert nk(*walk, (0.05976, 0.98, 5.62), (0.05466, 0.999, 5.70), (0.05715, 0.984, 5.68)) is None
    # the first three run whatever the ends cost: a point that met can lie below both ends (aibrix-kpa on
    # azure2023-conv: 0.08403 met at 8.30, 0.1004 missed at 8.16, 0.09185 met at 7.99)
    assert nk((0.12, 0.9, 7.32), (0.08403, 0.998, 8.30)) == 0.1004
    assert nk((0.12, 0.9, 7.32), (0.08403, 0.998, 8.30), (0.1004, 0.95, 8.16)) == 0.09185
    assert nk((0.12, 0.9, 7.32), (0.08403, 0.998, 8.30), (0.1004, 0.95, 8.16), (0.09185, 0.999, 7.99),
              (0.09603, 0.92, 8.66)) is None  # three done; the met point (7.99) costs less than the miss
    assert nk(*three, refine=0) is None  # no refinement asked: none at all


@pytest.mark.usefixtures("half_slo_default")
def test_the_points_cache_replays_a_sweep_and_keys_on_the_source(case: tuple[Trace, Backtest], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tr, bt = case
    CALLS.clear()
    _check_fake(sweep(tr, bt, FAKE, cap_gpu_hours=3.0, run=_fake_point, cache=PointCache(tmp_path, tr, bt)))
    assert len(CALLS) == 24 and len(list((tmp_path / "points").glob("*.json"))) == 24
    CALLS.clear()
    cache = PointCache(tmp_path, tr, bt)
    again = sweep(tr, bt, FAKE, cap_gpu_hours=3.0, run=_fake_point, cache=cache)
    _check_fake(again)
    assert CALLS == [] and cache.hits == 24 and cache.misses == 0
    assert all(p.cached and p.cpu_s == 0.5 for f in again for p in f.points)  # the CPU seconds it cost then
    # another seed is another key (whichever backtest the cache was made with: a run keys on its own seed);
    # so is another window of the trace
    CALLS.clear()
    sweep(tr, replace(bt, seed=1), ["hpa-kv"], cap_gpu_hours=3.0, run=_fake_point, cache=PointCache(tmp_path, tr, bt))
    assert len(CALLS) == 8
    sweep(tr, replace(bt, seed=1), ["hpa-kv"], cap_gpu_hours=3.0, run=_fake_point,
          cache=PointCache(tmp_path, tr, replace(bt, seed=1)))
    assert len(CALLS) == 8  # seed 1's, written by the run before
    sweep(tr.window(0.0, 300.0), bt, ["hpa-kv"], cap_gpu_hours=3.0, run=_fake_point,
          cache=PointCache(tmp_path, tr.window(0.0, 300.0), bt))
    assert len(CALLS) == 16  # hpa-kv's eight points twice
    # ours' policy changes: only ours' points run again
    real = frontier_cache.policy_sources
    monkeypatch.setattr(frontier_cache, "policy_sources",
                        lambda policy, root=None, mode=None: real(policy, root, mode)
                        + ("-changed" if policy == "ours" else ""))
    CALLS.clear()
    _check_fake(sweep(tr, bt, FAKE, cap_gpu_hours=3.0, run=_fake_point, cache=PointCache(tmp_path, tr, bt)))
    assert sorted(CALLS) == [("ours", 0.01), ("ours", 0.01429), ("ours", 0.01562), ("ours", 0.01597),
                             ("ours", 0.01615), ("ours", 0.01633), ("ours", 0.01708), ("ours", 0.02041)]
    # --fresh: nothing read, everything run and written again
    CALLS.clear()
    sweep(tr, bt, ["hpa-kv"], cap_gpu_hours=3.0, run=_fake_point, cache=PointCache(tmp_path, tr, bt, fresh=True))
    assert len(CALLS) == 8


SEEDED: list[tuple[str, float, int]] = []


def _seeded_point(trace: Trace, backtest: Backtest, policy: str, knob: float) -> Point:
    """hpa-kv as `_fake_point`, but each seed moves the knob where 99% is met down by 0.02 and costs 10% more
    GPU-hours: seed 0 meets it at 0.4 and below, seed 2 only at 0.36 and below."""
    SEEDED.append((policy, knob, backtest.seed))
    edge = 0.4 - 0.02 * backtest.seed
    return Point(knob, 0.99 if knob <= edge else 0.5, (1.0 + 0.1 * backtest.seed) / knob, 0.5)


def test_a_point_over_seeds_is_its_worst_attainment_at_its_mean_cost() -> None:
    runs = [Point(0.1, 0.995, 10.0, 1.0), Point(0.1, 0.985, 14.0, 2.0, cached=True), Point(0.1, 1.0, 12.0, 3.0)]
    p = over_seeds(0.1, runs)
    assert (p.knob, p.attainment, p.gpu_hours, p.cpu_s, p.cached) == (0.1, 0.985, 12.0, 6.0, False)
    assert over_seeds(0.1, [runs[1]]) is runs[1]  # one seed: the run itself, as a one-seed sweep has it
    assert over_seeds(0.1, [runs[1], runs[1]]).cached
    with pytest.raises(ValueError, match="at least one run"):
        over_seeds(0.1, [])


def test_a_sweep_over_seeds_reaches_the_target_only_where_every_seed_does(case: tuple[Trace, Backtest],
                                                                           tmp_path: Path) -> None:
    tr, bt = case
    SEEDED.clear()
    (one,) = sweep(tr, bt, ["hpa-kv"], cap_gpu_hours=None, run=_seeded_point)
    assert one.reached is not None and one.reached.knob == 0.3964 and {s for *_, s in SEEDED} == {0}
    SEEDED.clear()
    cache = PointCache(tmp_path, tr, bt)
    (three,) = sweep(tr, bt, ["hpa-kv"], cap_gpu_hours=None, run=_seeded_point, seeds=(0, 1, 2), cache=cache)
    # 0.392 meets 99% on seeds 0 and 1 but not 2: the walk goes on to 0.2744, then bisects back up to the
    # largest knob every seed meets it at (0.3586 <= 0.36 < 0.3626)
    assert [p.knob for p in three.points] == [0.8, 0.56, 0.392, 0.2744, 0.328, 0.3586, 0.3749, 0.3667, 0.3626]
    assert [p.attainment for p in three.points] == [0.5, 0.5, 0.5, 0.99, 0.99, 0.99, 0.5, 0.5, 0.5]
    assert three.reached is not None and three.reached.knob == 0.3586
    assert three.reached.gpu_hours == pytest.approx(1.1 / 0.3586)  # the mean of 1.0, 1.1 and 1.2 over the knob
    assert len(SEEDED) == 27
    assert {(k, s) for _, k, s in SEEDED} == {(p.knob, s) for p in three.points for s in (0, 1, 2)}
    # every run is its own cache entry: a one-seed sweep reads seed 0's, a three-seed replay runs nothing
    SEEDED.clear()
    (again,) = sweep(tr, bt, ["hpa-kv"], cap_gpu_hours=None, run=_seeded_point, seeds=(0, 1, 2),
                     cache=PointCache(tmp_path, tr, bt))
    assert SEEDED == [] and all(p.cached for p in again.points)
    assert [(p.knob, p.attainment, p.gpu_hours) for p in again.points] == \
        [(p.knob, p.attainment, p.gpu_hours) for p in three.points]
    (seed1,) = sweep(tr, replace(bt, seed=1), ["hpa-kv"], cap_gpu_hours=None, run=_seeded_point,
                     cache=PointCache(tmp_path, tr, replace(bt, seed=1)))
    # seed 1's runs, as a backtest with seed 1 keys them: only the knobs its own bisection adds are run
    three_knobs = {p.knob for p in three.points}
    assert seed1.points[0].cached and all(p.cached == (p.knob in three_knobs) for p in seed1.points)
    assert sorted(k for _, k, _ in SEEDED) == sorted(p.knob for p in seed1.points if not p.cached) != []
    SEEDED.clear()
    # the same in worker processes
    (par,) = sweep(tr, bt, ["hpa-kv"], cap_gpu_hours=None, run=_seeded_point, seeds=(0, 1, 2), workers=2)
    assert all(a.same(b) for a, b in zip(par.points, three.points, strict=True))
    with pytest.raises(ValueError, match="seeds repeat"):
        sweep(tr, bt, ["hpa-kv"], cap_gpu_hours=None, run=_seeded_point, seeds=(0, 0))


def test_source_digests_separate_ours_from_the_rest(tmp_path: Path) -> None:
    # what imports what: the simulator reaches the activator's routing rule and common's vocabulary (which
    # reaches common's times, lazily, and the package's __init__); ours' wiring reaches the scaler's policy,
    # and that common's durations; nothing imports the scaler's server
    imports = {"simulator/cluster/engine.py": "from keda_llm.activator import core\n",
               "simulator/control/policies.py": "from keda_llm.scaler import policy\n",
               "simulator/cluster/router.py": "import keda_llm.common.vocabulary as v\n",
               "common/vocabulary.py": "def f():\n    from keda_llm.common.times import x\n",
               "scaler/policy.py": "from keda_llm.common.durations import parse_duration\n",
               "simulator/report/frontier.py": "from keda_llm.common import unused\n",
               "activator/server.py": "from . import core\nfrom .core import x\n",
               # the routing rule reaches its helpers relatively: one level, and two from a subpackage
               "activator/core.py": "from . import picks\nfrom .sub import deep\n",
               "activator/sub/deep.py": "from ..loads import f\n",
               # a scaler module every point runs imports another (model.py imports seasonal.py)
               "scaler/model.py": "from keda_llm.scaler import seasonal\n"}
    files = ["simulator/cluster/engine.py", "simulator/cluster/router.py", "simulator/cluster/fluid_kernel.py",
             "simulator/control/policies.py", "simulator/report/frontier.py",
             "scaler/policy.py", "scaler/server.py", "scaler/model.py", "scaler/scaledobject.py", "common/__init__.py",
             "common/vocabulary.py", "common/times.py", "common/durations.py", "common/unused.py",
             "activator/core.py", "activator/server.py", "exporter/x.py", "activator/picks.py",
             "activator/sub/__init__.py", "activator/sub/deep.py", "activator/loads.py", "scaler/seasonal.py",
             "common/data.json"]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(imports.get(f, "") + f"# {f}\n")

    def digests() -> tuple[str, str, str, str]:
        frontier_cache._sources.cache_clear()
        return (policy_sources("ours", tmp_path), policy_sources("hpa-kv", tmp_path),
                policy_sources("ours", tmp_path, "detailed"), policy_sources("hpa-kv", tmp_path, "detailed"))

    # which digests move when one file changes: (ours', the others'), then the same for points run in the
    # detailed mode, which never execute the fluid mode's modules
    moves = {"scaler/policy.py": (True, False, True, False),
             "simulator/control/policies.py": (True, False, True, False),
             "simulator/cluster/engine.py": (True, True, True, True), "scaler/model.py": (True, True, True, True),
             "simulator/cluster/fluid_kernel.py": (True, True, False, False),
             "scaler/scaledobject.py": (True, True, True, True), "common/vocabulary.py": (True, True, True, True),
             "common/times.py": (True, True, True, True), "common/__init__.py": (True, True, True, True),
             "common/durations.py": (True, False, True, False), "activator/core.py": (True, True, True, True),
             "simulator/report/frontier.py": (False,) * 4, "common/unused.py": (False,) * 4,
             "activator/server.py": (False,) * 4, "scaler/server.py": (False,) * 4, "exporter/x.py": (False,) * 4,
             "activator/picks.py": (True,) * 4, "activator/sub/__init__.py": (True,) * 4,
             "activator/sub/deep.py": (True,) * 4, "activator/loads.py": (True,) * 4,
             "scaler/seasonal.py": (True,) * 4, "common/data.json": (True,) * 4}  # data beside a module read
    try:
        for f, expected in moves.items():
            before = digests()
            (tmp_path / f).write_text((tmp_path / f).read_text() + "# changed\n")
            after = digests()
            assert tuple(b != a for b, a in zip(before, after, strict=True)) == expected, f
        (tmp_path / "simulator" / "__pycache__").mkdir()
        before = digests()
        (tmp_path / "simulator" / "__pycache__" / "engine.cpython-311.pyc").write_bytes(b"x")
        assert digests() == before
        assert source_digest(("simulator",), root=tmp_path) != source_digest(("scaler",), root=tmp_path)
        (tmp_path / "common" / "vocabulary.py").write_text("x = (\n")  # a file whose imports cannot be read
        with pytest.raises(RuntimeError, match=r"cannot read the imports of .*vocabulary\.py"):
            digests()
    finally:
        frontier_cache._sources.cache_clear()


def test_an_anchors_module_keys_its_own_points_only(tmp_path: Path) -> None:
    # the anchors' package, with one anchor built on another's module (as AIBrix once ran Knative's decider):
    # every anchor runs base.py; the oracle and the other policies import the registry (run.py) but run none
    pkg = "simulator/control/anchors"
    imports = {f"{pkg}/__init__.py": "".join(f"from keda_llm.simulator.control.anchors import {m}\n" for m in
                                            ("aibrix", "dynamo", "keda_driven", "knative", "ray_serve")),
               f"{pkg}/aibrix.py": "from keda_llm.simulator.control.anchors.knative import KpaDecider\n"
                                   "from keda_llm.simulator.control.anchors.base import Signals\n",
               f"{pkg}/knative.py": "from keda_llm.simulator.control.anchors.base import Signals\n",
               "simulator/run.py": "from keda_llm.simulator.control.anchors import AnchorContext\n"}
    files = [f"{pkg}/{m}.py" for m in ("__init__", "base", "aibrix", "dynamo", "keda_driven", "knative", "ray_serve")]
    for f in [*files, "simulator/run.py", "scaler/model.py", "scaler/scaledobject.py"]:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(imports.get(f, "") + f"# {f}\n")
    policies = ("ours", "oracle", "queue", *frontier_cache.ANCHOR_MODULES)

    def digests() -> dict[str, str]:
        frontier_cache._sources.cache_clear()
        return {p: policy_sources(p, tmp_path) for p in policies}

    wva = {"llmd-wva", "llmd-wva-tokens", "hpa-kv"}
    moves = {f"{pkg}/aibrix.py": {"aibrix-kpa", "aibrix-apa"},
             f"{pkg}/knative.py": {"knative-kpa", "aibrix-kpa", "aibrix-apa"},
             f"{pkg}/keda_driven.py": wva, f"{pkg}/dynamo.py": {"dynamo-load", "dynamo-sla", "dynamo-sla-constant",
                                                                          "dynamo-sla-arima", "dynamo-sla-prophet"},
             f"{pkg}/ray_serve.py": {"ray-serve"}, f"{pkg}/base.py": set(policies),
             f"{pkg}/__init__.py": set(policies), "simulator/run.py": set(policies)}
    try:
        for f, expected in moves.items():
            before = digests()
            (tmp_path / f).write_text((tmp_path / f).read_text() + "# changed\n")
            after = digests()
            assert {p for p in policies if before[p] != after[p]} == expected, f
        # a new anchor module is in no point's key until an anchor runs it
        before = digests()
        (tmp_path / pkg / "new_anchor.py").write_text("# new\n")
        assert digests() == before
    finally:
        frontier_cache._sources.cache_clear()


def test_every_anchor_has_its_module_in_the_key() -> None:
    from keda_llm.simulator.control.anchors import ANCHORS

    assert set(frontier_cache.ANCHOR_MODULES) == set(ANCHORS)
    for name in ANCHORS:
        own = {rel for rel, _ in frontier_cache.point_files(name)} - {rel for rel, _ in frontier_cache.point_files("x")}
        assert f"{frontier_cache.ANCHORS_DIR}/{frontier_cache.ANCHOR_MODULES[name]}" in own, name
    # and the module each one names is the one its controller's class comes from
    from keda_llm.simulator.control.anchors import AnchorContext, build_anchor
    from keda_llm.simulator.hardware.presets import get_preset as preset

    p = preset("llama-3.1-8b/h100")
    for name in ANCHORS:
        ctl = build_anchor(name, AnchorContext(8, 2.0, 0.1, p.perf(), p.replica_config()))
        where = type(ctl).__module__
        if where.endswith("controllers"):  # a KEDA-driven anchor: its scaler is the anchor's object
            where = type(ctl.scalers[0]).__module__  # type: ignore[attr-defined]
        assert where.rpartition(".")[2] + ".py" == frontier_cache.ANCHOR_MODULES[name], (name, where)


def test_the_parts_a_point_key_follows_import_nothing_by_name() -> None:
    """The key follows import statements; a module imported by a string (importlib, __import__) would run in
    a point without being in its key. None does today; this keeps it so."""
    for part in ("simulator", "common", "activator", "scaler"):
        for path in sorted((ROOT / part).rglob("*.py")):
            text = path.read_text()
            allowed = path.relative_to(ROOT).as_posix() in frontier_cache.NOT_A_POINT
            assert allowed or ("import_module(" not in text and "__import__(" not in text), path


def test_sweep_is_monotone_enough_to_find_the_99_point(serial: list[Frontier]) -> None:
    for f in serial[:len(UP)]:
        att = [p.attainment for p in f.grid]
        gpu = [p.gpu_hours for p in f.grid]
        assert f.stop == "target" and 2 < len(f.grid) <= 6 and len(f.grid) < len(f.points) <= len(f.grid) + 5, f
        assert all(b >= a - 0.01 for a, b in itertools.pairwise(att)), att  # more capacity, more SLO
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(gpu)), gpu
        # the bisection points lie inside the grid's last step, which crossed the target
        lo, hi = sorted((f.grid[-2].knob, f.grid[-1].knob))
        assert all(lo < p.knob < hi for p in f.points[len(f.grid):])
        r = f.reached
        assert r is not None and r.attainment >= 0.99 and r.gpu_hours <= f.grid[-1].gpu_hours
        assert f.cost() == f"{r.gpu_hours:.2f} GPU-h"
        assert att[0] < 0.9  # the default alone does not meet it: the sweep found the point


def test_never_with_the_best_attainment_when_the_cap_stops_it(case: tuple[Trace, Backtest],
                                                             serial: list[Frontier]) -> None:
    hpa = serial[0]
    cap = hpa.points[2].gpu_hours + 1e-6  # the third point fits, the fourth costs more
    (f,) = sweep(*case, ["hpa-kv"], cap_gpu_hours=cap, points=6)
    assert len(f.points) == 4 and f.stop == "cap" and f.reached is None  # no crossing: no bisection
    assert all(a.same(b) for a, b in zip(f.points, hpa.points, strict=False))
    best = max(p.attainment for p in f.points)
    assert best < 0.99 and f.cost() == f"never (best {100 * best:.1f}%)"
    g = Frontier("hpa-kv", "x", 0.8, hpa.points[:2], 0.99, None)  # the grid ran out
    assert g.stop == "points" and g.reached is None


def test_a_default_that_meets_the_target_is_swept_toward_less_capacity(serial: list[Frontier]) -> None:
    gpu = serial[2]
    assert [p.knob for p in gpu.grid] == [80.0, 100.0]  # 80 / 0.7 = 114 is past the bound: 100 once
    assert gpu.went_down and gpu.stop == "below"
    assert gpu.points[0].attainment >= 0.99 > gpu.points[1].attainment
    # then the step is bisected: sqrt(80 x 100) = 89.44, then toward whichever side it fell
    assert gpu.points[2].knob == 89.44 and len(gpu.points) == 7  # five bisections: 90.7 met at half of 89.44's cost
    ok = [p for p in gpu.points if p.attainment >= 0.99]
    assert gpu.reached is min(ok, key=lambda p: p.gpu_hours)


def test_parallel_equals_serial(case: tuple[Trace, Backtest], serial: list[Frontier],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    par = sweep(*case, POLICIES, cap_gpu_hours=None, points=6, workers=2)
    assert [f.policy for f in par] == POLICIES
    for a, b in zip(par, serial, strict=True):
        assert len(a.points) == len(b.points) and all(x.same(y) for x, y in zip(a.points, b.points, strict=True))
    assert par[2].went_down and par[2].stop == serial[2].stop == "below"
    _half_slo(monkeypatch)  # the stand-in after the real sweeps, which run at the shipped default
    _check_fake(sweep(*case, FAKE, cap_gpu_hours=3.0, points=6, run=_fake_point, workers=2))


def test_ray_without_ray_installed_is_one_line_with_a_hint() -> None:
    """scripts/simulator_table.py --ray where the [ray] extra is not installed: one line, no traceback."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("ray") is not None:
        pytest.skip("Ray is installed here")
    script = Path(__file__).resolve().parents[2] / "scripts" / "simulator_table.py"
    done = subprocess.run([sys.executable, str(script), "--frontier", "--quick", "--ray", "auto"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("--ray needs Ray, which is not installed; hint: pip install 'keda-llm[ray]', or run "
                                   "on --workers N")


@pytest.mark.skipif(not os.environ.get("KEDA_LLM_TEST_RAY"),
                    reason="starting a local Ray instance takes 15-45 s on 2 cores: set KEDA_LLM_TEST_RAY=1")
def test_ray_equals_serial(case: tuple[Trace, Backtest], serial: list[Frontier]) -> None:
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'keda-llm[ray]'")
    (f,) = sweep(*case, ["concurrency"], cap_gpu_hours=None, points=6, ray_address="auto")
    assert all(x.same(y) for x, y in zip(f.points, serial[1].points, strict=True))
    (g,) = sweep(*case, ["gpu"], cap_gpu_hours=None, points=6, ray_address="auto")  # toward less capacity
    assert all(x.same(y) for x, y in zip(g.points, serial[2].points, strict=True)) and g.stop == "below"


def test_frontier_section_round_trips_and_plots(case: tuple[Trace, Backtest], tmp_path: Path) -> None:
    st = _script()
    tr, bt = case
    tf = frontier(tr.window(0.0, 120.0), bt, ["concurrency"], points=2)
    assert tf.feasible_share > 0.99 and tf.target == pytest.approx(0.99)
    assert tf.bound_gpu_hours <= tf.oracle.gpu_hours <= tf.static.gpu_hours + 1e-9
    text = st.frontier_section("synthetic", tf, 3, "x.png", 1.0)
    block = st.merge_sections({}, {"synthetic": text})
    (row,) = st.parse_frontier_table(st.parse_sections(block)["synthetic"])
    assert row["policy"] == "concurrency" and row["stop"] in ("target", "cap", "points", "below", "flat", "bound")
    st.plot_frontier(tf, "synthetic", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


COST = re.compile(r"^(\d+\.\d\d GPU-h|never \(best \d+\.\d%\)|not in \d+ points \(best \d+\.\d%\)|"
                  r"over the cap \(\d+\.\d% at (\d+\.\d\d) GPU-h\))$")
CAP = re.compile(r"static at its peak \(the cap\) (\d+\.\d\d) GPU-h")


def test_the_docs_frontier_block_parses() -> None:
    st = _script()
    sections = st.parse_sections(st.read_block(ROOT / "docs" / "simulator-results.md", "frontier"))
    assert sections, "no frontier sections in docs/simulator-results.md"
    assert {c.trace for c in st.CASES} <= {t.split(" ")[0] for t in sections}
    for title, text in sections.items():
        rows = st.parse_frontier_table(text)
        assert [r["policy"] for r in rows] == st.FRONTIER_POLICIES, title
        cost = next(k for k in rows[0] if k.startswith("cost to reach"))
        cap = CAP.search(text)
        assert cap, title
        for r in rows:
            m = COST.match(r[cost])
            assert m, (title, r)
            if m.group(2) is not None:  # met only over the cap: dearer than static at the peak
                assert float(m.group(2)) > float(cap.group(1)), (title, r)
            elif r[cost].endswith("GPU-h"):  # a cost to reach counts only under the cap
                assert float(r[cost].split()[0]) <= float(cap.group(1)), (title, r)
            assert r["stop"] in ("target", "cap", "points", "below", "flat", "bound")
            assert r[cost].startswith("not in ") == (r["stop"] == "points" and m.group(2) is None
                                                      and not r[cost].endswith("GPU-h")), (title, r)
        img = re.search(r"\]\((img/[^)]+\.png)\)", text)
        assert img and (ROOT / "docs" / img.group(1)).is_file(), title


def test_the_installed_parts_are_hashed_wherever_python_imports_them_from() -> None:
    """An editable install maps each part (simulator/, scaler/, ...) to its own folder: the digest must read
    those files, not the keda_llm package folder (which holds none of them: the digest of nothing would
    let a cache outlive every change to the simulator)."""
    names = {rel for rel, _ in frontier_cache.point_files("shared")}
    assert "simulator/run.py" in names and "scaler/model.py" in names and "common/vocabulary.py" in names
    assert "activator/core.py" in names and "common/__init__.py" in names  # imported: the routing rule
    assert "simulator/report/frontier.py" not in names  # the sweep itself is not a point's source
    assert "activator/server.py" not in names and "activator/cli.py" not in names  # never run by a point
    ours = {rel for rel, _ in frontier_cache.point_files("ours")}
    assert names < ours and {"scaler/policy.py", "scaler/decide.py", "scaler/slo.py"} <= ours
    assert "scaler/server.py" not in ours and "scaler/cli.py" not in ours  # the scaler's own front ends
    assert source_digest(frontier_cache.SHARED_SOURCES) != source_digest(())


def test_a_point_over_a_cap_that_static_meets_does_not_reach_the_target() -> None:
    # a grid step that jumps past the cap (static at the oracle's peak) and meets the target there is as
    # dominated by static as a policy the cap stopped: reported, not counted as reaching the target
    pts = (Point(0.1, 0.08, 7.0, 0.0), Point(0.07, 0.998, 71.37, 0.0), Point(0.08, 0.97, 40.0, 0.0))
    f = Frontier("dynamo-load", "ITL SLA (s)", 0.1, pts, 0.99, 45.91, cap_meets_target=True)
    assert f.reached is None and f.reached_over_cap == pts[1] and f.over_cap(pts[1]) and not f.over_cap(pts[2])
    assert f.cost() == "over the cap (99.8% at 71.37 GPU-h)"
    # where static misses the target the cap is no alternative: every point counts
    g = replace(f, cap_meets_target=False)
    assert g.reached == pts[1] and g.reached_over_cap is None and g.cost() == "71.37 GPU-h"
    # a point under the cap that meets the target is the cost to reach it, the one above it aside
    h = replace(f, points=(*pts, Point(0.075, 0.99, 44.0, 0.0)))
    assert h.reached is not None and h.reached.gpu_hours == 44.0 and h.reached_over_cap is None
    # no point meets it, and the sweep went on past the cap: never, with the best attainment
    k = replace(f, points=(pts[0], Point(0.07, 0.97, 50.0, 0.0)))
    assert k.reached is None and k.reached_over_cap is None and k.stop == "cap" and k.cost() == "never (best 97.0%)"
    # no point meets it and the grid ran out under the cap: more capacity might still reach it, so not "never"
    m = replace(f, points=(pts[0], pts[2]))
    assert m.stop == "points" and m.cost() == "not in 2 points (best 97.0%)"


def test_the_docs_frontier_block_is_what_the_committed_points_give() -> None:
    """Each trace's section in the docs, rebuilt from docs/data/frontier-points alone (nothing simulated): a
    hand-edited figure, a section written by other code than the store's, or a corrupt entry fails here.
    A trace whose points the store lacks for this source fails too: its section is no longer what the code
    gives. A change that moves no result is carried over with scripts/carry_points.py; one that moves points
    is re-simulated by `--frontier` (just those). A skip here once hid a stale store over several commits."""
    st = _script()
    bt = Backtest(get_preset(st.PRESET), cold_start="typical", slo=st.SLO)
    docs = st.parse_sections(st.read_block(ROOT / "docs" / "simulator-results.md", "frontier"))
    stale: list[str] = []
    for case in st.CASES:
        title = st.case_title(case, False)
        try:
            mine = st.frontier_from_store(bt, case, st.FRONTIER_POLICIES, st.FRONTIER_POINTS,
                                          tuple(range(st.FRONTIER_SEEDS)))
        except st.StoreMiss as e:
            stale.append(f"{title} ({e})")
            continue
        assert st.RUN_NOTE.sub("", mine) == st.RUN_NOTE.sub("", docs[title]), title
    assert not stale, ("the committed points are stale for this source: " + "; ".join(stale)
                       + ". hint: scripts/carry_points.py --from <the revision that wrote them> where no result "
                       "moved, else scripts/simulator_table.py --frontier")


def test_the_docs_predictors_table_is_what_the_committed_points_give() -> None:
    """docs/simulator-results.md "Dynamo's predictors": the ARIMA and Prophet planners' cells (swept by hand, not in
    the frontier block) are each trace's cost to reach the target as the store gives it, nothing simulated."""
    from keda_llm.simulator.control.anchors import VARIANTS

    st = _script()
    bt = Backtest(get_preset(st.PRESET), cold_start="typical", slo=st.SLO)
    doc = (ROOT / "docs" / "simulator-results.md").read_text()
    table = doc[doc.index("### Dynamo's predictors"):]
    table = table[:table.index("\n### ")]
    rows = {line.split(" | ")[0][2:].split(",")[0]: line.split(" | ") for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| trace")}
    checked = 0
    bounded: list[tuple[object, list[str]]] = []
    for case in st.CASES:
        row = rows.get(case.trace)
        assert row is not None, case.trace
        if "not run" in row[3]:
            bounded.append((case, row))
            continue
        section = st.frontier_from_store(bt, case, list(VARIANTS), st.FRONTIER_POINTS, tuple(range(st.FRONTIER_SEEDS)))
        for column, policy in ((3, "dynamo-sla-arima"), (4, "dynamo-sla-prophet")):
            (cells,) = [r.split(" | ") for r in section.splitlines() if r.startswith(f"| {policy} |")]
            cost, ratio, knob = cells[3].replace(" GPU-h", ""), cells[4], cells[5]
            want = f"{cost} ({ratio}) at {knob} s" if ratio else cost
            assert row[column].startswith(want), (case.trace, policy, row[column], want)
            checked += 1
    assert checked >= 6  # azure2023-code, azure2023-conv and mooncake-conv at least
    # A trace not run carries a bound: the planner never writes under one replica, so any predictor costs at
    # least one replica for the whole trace; the cell says that figure and that the run is not in the store.
    preset = get_preset(st.PRESET)
    for case, row in bounded:
        tr = st.load(case, False)
        bound = preset.tp * tr.duration_s / 3600.0
        for column in (3, 4):
            assert row[column].startswith(f"at least {bound:.2f} ("), (case.trace, row[column], bound)
        ours = float(re.sub(r"[^0-9.]", "", row[5].split(" (")[0]))
        assert ours < bound, (case.trace, ours, bound)  # the table's claim: ours ahead there too


def test_every_dynamo_sla_predictor_keeps_one_replica(case: tuple[Trace, Backtest]) -> None:
    """The floor the predictors table's bound rests on: each SLA planner variant starts with one replica and
    clamps every count it writes to at least one (`min_endpoint` 1), whatever its predictor says."""
    from keda_llm.simulator.control.anchors import VARIANTS
    from keda_llm.simulator.control.anchors.base import OwnLoopController
    from keda_llm.simulator.report.frontier_point import build_point_controller

    tr, bt = case
    for name in ("dynamo-sla", "dynamo-sla-constant", *VARIANTS):
        ctl = build_point_controller(name, 0.1, tr, bt)
        assert isinstance(ctl, OwnLoopController), name
        assert (ctl.initial_replicas, ctl.min_replicas) == (1, 1), name


def test_the_store_check_fails_on_a_figure_the_points_do_not_give(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`--frontier --check` on the first trace the store holds for this source: 0 on the docs as they are, 1
    once one figure in that trace's section is changed, and 2 for a trace it cannot rebuild."""
    st = _script()
    bt = Backtest(get_preset(st.PRESET), cold_start="typical", slo=st.SLO)
    args = (st.FRONTIER_POLICIES, st.FRONTIER_POINTS, tuple(range(st.FRONTIER_SEEDS)))
    doc = (ROOT / "docs" / "simulator-results.md").read_text()
    monkeypatch.setattr(st, "DOCS", tmp_path)
    (tmp_path / "simulator-results.md").write_text(doc)
    case = next((c for c in st.CASES if st.check_frontier(bt, [c], *args) == 0), None)
    assert case is not None, "the committed points are stale for this source on every trace (the test above says how)"
    sections = st.parse_sections(st.read_block(tmp_path / "simulator-results.md", "frontier"))
    section = sections[st.case_title(case, False)]
    oracle = re.search(r"Oracle (\d+\.\d\d) GPU-h", section)
    assert oracle
    changed = section.replace(oracle.group(0), f"Oracle {float(oracle.group(1)) + 0.01:.2f} GPU-h", 1)
    (tmp_path / "simulator-results.md").write_text(doc.replace(section, changed))
    assert st.check_frontier(bt, [case], *args) == 1
    monkeypatch.setattr(st, "CACHE", tmp_path / "empty-store")
    assert st.check_frontier(bt, [case], *args) == 2


def test_a_points_cache_keyed_by_another_checkouts_source_reads_what_that_source_wrote(
        case: tuple[Trace, Backtest], tmp_path: Path) -> None:
    """scripts/carry_points.py reads the entries an earlier revision wrote through `sources_root`: a copy of
    the installed parts keys exactly as they do, an edited copy keys apart."""
    tr, bt = case
    same, edited = tmp_path / "same", tmp_path / "edited"
    for tree in (same, edited):
        for part in ("simulator", "scaler", "common", "activator"):
            shutil.copytree(frontier_cache._part_dir(part, None), tree / part,
                            ignore=shutil.ignore_patterns("__pycache__"))
    with (edited / "simulator" / "run.py").open("a") as f:
        f.write("\n# an edit\n")
    store = tmp_path / "store"
    PointCache(store, tr, bt, sources_root=edited).put("hpa-kv", Point(0.5, 0.9, 3.0, 1.0))
    assert PointCache(store, tr, bt).get("hpa-kv", 0.5) is None
    assert PointCache(store, tr, bt, sources_root=same).get("hpa-kv", 0.5) is None
    got = PointCache(store, tr, bt, sources_root=edited).get("hpa-kv", 0.5)
    assert got is not None and (got.attainment, got.gpu_hours) == (0.9, 3.0)
    PointCache(store, tr, bt, sources_root=same).put("hpa-kv", Point(0.6, 0.8, 2.0, 1.0))
    assert PointCache(store, tr, bt).get("hpa-kv", 0.6) is not None  # the unedited copy is the installed source


def test_entries_written_under_another_key_rule_are_read_by_that_rule(case: tuple[Trace, Backtest],
                                                                      tmp_path: Path) -> None:
    """A change to what a point's key reads (frontier_cache.NOT_A_POINT) moves every entry's key without moving a
    result: carry_points reads the revision's entries with the revision's own rule, loaded from its tree."""
    tr, bt = case
    cp = load_script("carry_points")
    old = tmp_path / "old"
    for part in ("simulator", "scaler", "common", "activator"):
        shutil.copytree(frontier_cache._part_dir(part, None), old / part, ignore=shutil.ignore_patterns("__pycache__"))
    assert cp.key_rule(old) is PointCache  # the same rule: the installed class
    rule = old / "simulator" / "report" / "frontier_cache.py"
    # the old rule keyed a module the new one leaves out (as simulator/report/reactive.py until 2026-12-07)
    text = rule.read_text()
    assert '"simulator/report/reactive.py",' in text
    rule.write_text(text.replace('"simulator/report/reactive.py",', "", 1))
    old_rule = cp.key_rule(old)
    assert old_rule is not PointCache
    store = tmp_path / "store"
    old_rule(store, tr, bt, sources_root=old).put("hpa-kv", Point(0.5, 0.9, 3.0, 1.0))
    assert PointCache(store, tr, bt, sources_root=old).get("hpa-kv", 0.5) is None  # the new rule misses it
    got = old_rule(store, tr, bt, sources_root=old).get("hpa-kv", 0.5)
    assert got is not None and (got.attainment, got.gpu_hours) == (0.9, 3.0)


def test_carrying_points_re_simulates_each_groups_dearest_and_a_seeded_sample_within_the_budget() -> None:
    cp = load_script("carry_points")
    entries = [cp.Entry(c, pol, 0.1 * i, 0, Point(0.1 * i, 0.9, 1.0, cpu))
               for c in (0, 1) for pol in ("gpu", "ours") for i, cpu in enumerate((5.0, 50.0, 10.0, 20.0))]
    dearest = [e for e in entries if e.point.cpu_s == 50.0]
    assert cp.sample(entries, 0.0, 0) == dearest  # whatever the budget
    picked = cp.sample(entries, 250.0, 0)
    assert picked[:4] == dearest and sum(e.point.cpu_s for e in picked) <= 250.0 and len(picked) > 4
    assert picked == cp.sample(entries, 250.0, 0) and len(cp.sample(entries, 1e9, 0)) == len(entries)
