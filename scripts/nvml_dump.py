"""Read every GPU once through the exporter's NVML collector and print what it saw: for a real GPU.

    python scripts/nvml_dump.py [--watch SECONDS]

Prints one JSON object per GPU or MIG slice (the fields of exporter.model.GpuMetrics, in base units:
bytes, watts, joules, hertz), the clock event reasons decoded by name, and the replica-degraded reasons
the exporter would derive (exporter/degraded.py). --watch keeps collecting every second for that long
first, so critical XIDs that arrive meanwhile are counted. Exits 1 when NVML finds no GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from keda_llm.common.vocabulary import CLOCK_EVENT_REASONS
from keda_llm.exporter.degraded import gpu_reasons
from keda_llm.exporter.nvml import NvmlCollector


def main(argv: list[str] | None = None, nvml: Any = None) -> int:
    """`nvml`: a pynvml stand-in (tests pass exporter.fake_nvml.FakeNvml); None: the real pynvml."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watch", type=float, default=0.0, help="collect every second for this long first")
    args = ap.parse_args(argv)
    collector = NvmlCollector(nvml)
    gpus = collector.collect()
    deadline = time.monotonic() + args.watch
    while time.monotonic() < deadline:
        time.sleep(1.0)
        gpus = collector.collect()
    collector.close()
    for g in gpus:
        row = dataclasses.asdict(g)
        mask = g.clock_event_reasons
        row["clock_events"] = None if mask is None else [name for name, bit in CLOCK_EVENT_REASONS if mask & bit]
        row["degraded_reasons"] = [r for r, on in gpu_reasons(g).items() if on]
        print(json.dumps(row, sort_keys=True))
    if not gpus:
        print("NVML found no GPU (no driver, no device, or no permission)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
