"""The golden runs: a few short backtests whose every result is fingerprinted, so that a refactor of the
simulator that changes any number (one request's TTFT, a GPU-second, a scaling) fails a test.

The cases cover both modes (detailed and fluid), our policy, a baseline (KEDA's Prometheus scaler on
num_requests_waiting) and an anchor (Knative's KPA, its own control loop), on 8B and 70B TP4 presets over
short windows of the shipped Azure 2023 traces. A fingerprint is, per run, the SHA-256 of every request's
arrival, TTFT, TPOT and finish (float64 bytes, NaN/inf included) and of the timeline, with the totals beside
them in the clear so a failure says what moved. Recorded from main before the simulator's restructuring
(tests/simulator/golden_runs.json); re-record only for a change meant to move results:

    python tests/simulator/golden.py --record

The comparison is exact (bit for bit): the runs are pure functions of their inputs and seed, and the
compiled kernel is built without fast-math. A different numpy or CPU could move the last bits of a sum;
then the hashes differ while the totals agree to ~1e-15, and the recording is redone on that platform.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from keda_llm.simulator.cluster.engine import SimResult
from keda_llm.simulator.control.anchors import AnchorContext
from keda_llm.simulator.control.policies import build_controller
from keda_llm.simulator.hardware.presets import get_preset
from keda_llm.simulator.report.summary import Slo
from keda_llm.simulator.run import Backtest, concurrency_target, simulate
from keda_llm.simulator.workload.traces import load_shipped

RECORDING = Path(__file__).with_name("golden_runs.json")
SLO = Slo(ttft_s=2.0, itl_s=0.1)


@dataclass(frozen=True)
class Case:
    preset: str
    trace: str
    start_s: float
    end_s: float
    policy: str
    mode: str

    @property
    def key(self) -> str:
        return f"{self.preset} {self.trace}[{self.start_s:g},{self.end_s:g}) {self.policy} {self.mode}"


_WINDOWS = (("llama-3.1-8b/h100", "azure2023-code", 1200.0, 1800.0),
            ("llama-3.1-70b/h100-tp4", "azure2023-conv", 600.0, 900.0))
CASES = tuple(Case(p, t, a, b, policy, mode) for p, t, a, b in _WINDOWS
              for policy in ("ours", "queue", "knative-kpa") for mode in ("detailed", "fluid"))


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()[:32]


def run_case(case: Case) -> SimResult:
    preset = get_preset(case.preset)
    trace = load_shipped(case.trace).window(case.start_s, case.end_s)
    bt = Backtest(preset, slo=SLO, mode=case.mode)  # type: ignore[arg-type]
    ctl = build_controller(case.policy, model=preset.model.name, max_replicas=bt.max_replicas,
                           concurrency_target=concurrency_target(trace, bt), static_replicas=1,
                           cold_start_s=preset.cold_start(bt.cold_start).quantile(0.9),
                           slo=(SLO.ttft_s, SLO.itl_s),
                           anchor=AnchorContext(bt.max_replicas, SLO.ttft_s, SLO.itl_s, preset.perf(),
                                                preset.replica_config()))
    return simulate(trace, bt, ctl, case.mode)  # type: ignore[arg-type]


def fingerprint(res: SimResult) -> dict[str, Any]:
    """Every number of a run that a refactor must keep: per request, per timeline row, and the totals."""
    table = res.request_table()
    order = np.argsort(table.arrival_s, kind="stable")
    arrival, ttft, tpot = table.arrival_s[order], table.ttft_s[order], table.tpot_s[order]
    if res.cohorts is None:  # detailed: the requests' own finish times (NaN: not served)
        finish = np.array([math.nan if r.finish_s is None else r.finish_s for r in res.requests])[order]
    else:  # fluid: first token + (output - 1) x TPOT is what it keeps
        finish = np.full(len(arrival), math.nan)
    tl = res.timeline
    rows = np.array([tl.t, tl.arrivals, tl.ready, tl.starting, tl.draining, tl.desired, tl.gateway, tl.running,
                     tl.waiting], dtype=np.float64)
    served = np.isfinite(ttft)
    return {
        "requests": len(arrival), "served": int(served.sum()),
        "dropped": len(res.dropped_timeout) + len(res.dropped_rejected), "refused": res.refused_count,
        "gpu_seconds": res.gpu_seconds, "end_s": res.end_s, "cold_starts": res.cold_starts,
        "zero_seconds": res.zero_seconds, "scale_events": res.scale_events, "controller_events": len(res.events),
        "ttft_sum": float(ttft[served].sum()), "tpot_sum": float(np.nansum(tpot)),
        "requests_sha": _digest(arrival, ttft, tpot, finish), "timeline_sha": _digest(rows),
    }


def fingerprints() -> dict[str, dict[str, Any]]:
    return {c.key: fingerprint(run_case(c)) for c in CASES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--record", action="store_true", help=f"write {RECORDING.name}")
    args = ap.parse_args()
    got = fingerprints()
    text = json.dumps(got, indent=1, sort_keys=True) + "\n"
    if args.record:
        RECORDING.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
