"""The gateway in front of a model's replicas: the activator's rules (activator/core.py), run per request.

A request that arrives while no replica is ready is held in the activator's bounded queue
(`core.HeldQueue`): past `max_held` it is refused with the activator's reason, status and
`Retry-After` (`core.retry_after`: what is left of the expected cold start since the model was
woken), and it is dropped once held `max_wait_s` (the activator's `max_wait`, 503). When a replica
turns ready the held requests leave in the queue's order. The held count is the upstream demand the
scaler reads through `activationQuery` (and the gateway calls POST /v1/activate on a hold).

Routing rules, all `core.pick_index`:
- `least_outstanding` (default): the activator's rule without exporter metrics (fewest outstanding
  requests) with its tie-break cursor fixed at 0, so ties go to the oldest replica and a run is a
  pure function of its inputs; what vLLM production-stack's and most LLM gateways' default load
  balancing amounts to;
- `least_loaded`: the activator's rule as production runs it: KV usage and waiting requests from
  the last collection (what the exporters reported, as stale as theirs), the saturation escape
  hatch, fewest outstanding while a ready replica has no sample yet, ties rotating;
- `round_robin`: the next replica by index.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from keda_llm.activator import core
from keda_llm.simulator.hardware.replica import Request

RoutingRule = Literal["least_outstanding", "least_loaded", "round_robin"]
ROUTING_RULES: tuple[RoutingRule, ...] = ("least_outstanding", "least_loaded", "round_robin")
#: the activator's rules with no exporter metrics and no cap: the fewest outstanding requests win
_BY_OUTSTANDING = core.RoutingRules()


class Routable(Protocol):
    """What the router needs of a replica: a stable index and how many requests it holds."""

    @property
    def index(self) -> int: ...

    @property
    def outstanding(self) -> int: ...


@dataclass(frozen=True)
class Refusal:
    """A request the gateway answered without a replica: what the activator's client would get."""

    request: Request
    at: float
    reason: core.RejectReason
    status: int
    retry_after: int


class HeldRequests:
    """The held requests in release order, as a sequence view of the core queue (read-only)."""

    def __init__(self, queue: core.HeldQueue) -> None:
        self._queue = queue

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return len(self._queue) > 0

    def __iter__(self) -> Iterator[Request]:
        for t in self._queue.held():
            assert isinstance(t.handle, Request)
            yield t.handle

    def __getitem__(self, i: int) -> Request:
        return list(self)[i]


@dataclass
class Router:
    """Chooses among the ready replicas; holds (or refuses) the requests that arrive while there are none.

    `max_held`: the activator's bound (None: unbounded, the default of a backtest). `cold_start_s`: the
    activator's `cold_start`, the expected cold start that `Retry-After` counts down from a wake."""

    rule: RoutingRule = "least_outstanding"
    max_wait_s: float = 600.0
    max_held: int | None = None
    cold_start_s: float = 120.0
    rules: core.RoutingRules = field(default_factory=core.RoutingRules)

    def __post_init__(self) -> None:
        if self.rule not in ROUTING_RULES:
            raise ValueError(f"router: rule must be one of {', '.join(ROUTING_RULES)}, got {self.rule!r}")
        if not self.max_wait_s > 0:
            raise ValueError(f"router: max_wait_s must be > 0, got {self.max_wait_s}")
        if self.max_held is not None and self.max_held < 0:
            raise ValueError(f"router: max_held must be >= 0, got {self.max_held}")
        if not self.cold_start_s >= 0:
            raise ValueError(f"router: cold_start_s must be >= 0, got {self.cold_start_s}")
        bound = sys.maxsize if self.max_held is None else self.max_held
        self.held = core.HeldQueue("gateway", max_held=bound, max_wait=self.max_wait_s)
        self.queue = HeldRequests(self.held)
        self.routing = core.Routing(self.rules)
        self.loads: dict[int, tuple[float, float]] = {}  # replica index -> (KV usage, waiting), last collection
        self.woken_at: float | None = None  # the first hold since no replica was ready
        self.refused: list[Refusal] = []
        self.waits: list[float] = []  # seconds each released request was held (the activator's wait histogram)
        self.dropped_timeout = 0
        self._next = 0

    @property
    def bound(self) -> int:
        return self.held.max_held

    def pick(self, ready: Sequence[Routable]) -> Routable | None:
        """The replica for the next request, or None when none is ready (see the module docstring)."""
        if not ready:
            return None
        if self.rule == "least_outstanding":
            i = core.pick_index([core.EndpointLoad("", r.outstanding) for r in ready], _BY_OUTSTANDING, 0)
        elif self.rule == "least_loaded":
            loads = []
            for r in ready:
                kv, waiting = self.loads.get(r.index, (None, None))
                loads.append(core.EndpointLoad("", r.outstanding, kv, waiting))
            i = self.routing.pick_index(loads)
        else:
            after = [r for r in ready if r.index >= self._next]
            chosen = min(after, key=lambda r: r.index) if after else min(ready, key=lambda r: r.index)
            self._next = chosen.index + 1
            return chosen
        return None if i is None else ready[i]

    def observed(self, loads: dict[int, tuple[float, float]]) -> None:
        """The collection's per-replica KV usage and waiting requests (what `least_loaded` routes on)."""
        self.loads = loads

    def retry_after(self, now: float) -> int:
        return core.retry_after(now, self.woken_at, self.cold_start_s)

    def hold(self, request: Request, now: float) -> Refusal | None:
        """No replica is ready: hold the request, or refuse it past the bound (returned, and kept in
        `refused`)."""
        if self.woken_at is None:
            self.woken_at = now
        offer = self.held.offer(0, request.arrival_s, self.retry_after(now))
        if isinstance(offer, core.Refused):
            refusal = Refusal(request, now, offer.reason, core.REJECT_STATUS[offer.reason], offer.retry_after)
            self.refused.append(refusal)
            return refusal
        offer.ticket.handle = request
        return None

    def release(self, now: float) -> tuple[list[Request], list[Request]]:
        """A replica is ready: (the held requests, in the queue's order; those held past max_wait_s)."""
        late = self.expire(now)
        keep: list[Request] = []
        while (t := self.held.pop()) is not None:
            assert isinstance(t.handle, Request)
            keep.append(t.handle)
            self.waits.append(now - t.arrived)
        self.woken_at = None
        return keep, late

    def expire(self, now: float) -> list[Request]:
        """Drop the held requests that have waited max_wait_s (503 max_wait in the activator)."""
        late = [t.handle for t in self.held.expire(now) if isinstance(t.handle, Request)]
        self.dropped_timeout += len(late)
        return late

    def take_all(self) -> list[Request]:
        """The end of the run: every request still held (counted as dropped by the caller)."""
        return [t.handle for t in self.held.take_all() if isinstance(t.handle, Request)]

    @property
    def pending(self) -> int:
        """Requests held at the gateway: the `activationQuery` demand."""
        return len(self.held)
