"""The simulator's clock and its event heap: what happens next, and when.

Every event sits on one heap keyed `(time, priority, seq)`; at one instant the priorities order them:

  0 STEP    an engine iteration (or decode run) ends: its finished requests leave, the next one starts
  1 PHASE   a pod is scheduled or becomes ready (a ready pod takes the gateway's queue)
  2 ARRIVAL the next trace request reaches the gateway
  3 OBSERVE collection: the replicas' gauges and counters become an Observation (every interval)
  4 CONTROL the controller's next tick (KEDA poll / HPA sync / StreamIsActive push, or a schedule step)

and `seq` (insertion order) breaks the remaining ties, so a run is a pure function of its inputs and
seed. STEP and ARRIVAL are the detailed backend's own events (simulator/cluster/detailed.py); the fluid backend
steps its replicas between events instead (simulator/cluster/fluid.py).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

STEP, PHASE, ARRIVAL, OBSERVE, CONTROL = 0, 1, 2, 3, 4


class EventLoop:
    """The simulated time `now` and the events due later. Pure bookkeeping: the Simulation pops and handles."""

    __slots__ = ("_heap", "_seq", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    def push(self, at: float, kind: int, obj: Any = None) -> None:
        """Schedule an event of `kind` (a priority above) at time `at` with its payload."""
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, obj))

    def next_time(self) -> float:
        """When the next event is due (inf: none)."""
        return self._heap[0][0] if self._heap else math.inf

    def pop_before(self, until: float) -> tuple[float, int, Any] | None:
        """The next event as (time, kind, payload) if it is due before `until`, else None; the caller sets
        `now` (the fluid backend handles an event at its slice's start when that is later)."""
        heap = self._heap
        if heap and heap[0][0] < until:
            at, kind, _, obj = heapq.heappop(heap)
            return at, kind, obj
        return None

    def __len__(self) -> int:
        return len(self._heap)
