"""The gateway in front of a model's replicas: picks a replica per request, or holds the request.

Two routing rules: least outstanding requests (what vLLM production-stack's and most LLM gateways'
default load balancing amounts to) and round robin. A request that arrives while no replica is
ready waits in the gateway's queue instead of failing; it is dropped only once it has waited
`max_wait_s`. That queue is the upstream demand the scaler reads through `activationQuery` (and the
gateway may also call POST /v1/activate on the first queued request): scale from zero loses nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from keda_llm.simulator.replica import Request

RoutingRule = Literal["least_outstanding", "round_robin"]
ROUTING_RULES: tuple[RoutingRule, ...] = ("least_outstanding", "round_robin")


class Routable(Protocol):
    """What the router needs of a replica: a stable index and how many requests it holds."""

    @property
    def index(self) -> int: ...

    @property
    def outstanding(self) -> int: ...


@dataclass
class Router:
    """Chooses among the ready replicas; holds the requests that arrive while there are none."""

    rule: RoutingRule = "least_outstanding"
    max_wait_s: float = 600.0

    def __post_init__(self) -> None:
        if self.rule not in ROUTING_RULES:
            raise ValueError(f"router: rule must be one of {', '.join(ROUTING_RULES)}, got {self.rule!r}")
        if not self.max_wait_s > 0:
            raise ValueError(f"router: max_wait_s must be > 0, got {self.max_wait_s}")
        self.queue: deque[Request] = deque()
        self._next = 0
        self.dropped_timeout = 0

    def pick(self, ready: Sequence[Routable]) -> Routable | None:
        """The replica for the next request, or None when none is ready.

        Least outstanding: fewest requests held, ties to the lowest index (the oldest replica), so a
        run is deterministic. Round robin: the next index after the last one picked.
        """
        if not ready:
            return None
        if self.rule == "least_outstanding":
            return min(ready, key=lambda r: (r.outstanding, r.index))
        after = [r for r in ready if r.index >= self._next]
        chosen = min(after, key=lambda r: r.index) if after else min(ready, key=lambda r: r.index)
        self._next = chosen.index + 1
        return chosen

    def hold(self, request: Request) -> None:
        """No replica is ready: the request waits at the gateway."""
        self.queue.append(request)

    def release(self, now: float) -> tuple[list[Request], list[Request]]:
        """Empty the queue: (requests still within max_wait_s, in arrival order; requests that timed out)."""
        keep: list[Request] = []
        late: list[Request] = []
        while self.queue:
            r = self.queue.popleft()
            (late if now - r.arrival_s > self.max_wait_s else keep).append(r)
        self.dropped_timeout += len(late)
        return keep, late

    def expire(self, now: float) -> list[Request]:
        """Drop the queued requests that have waited longer than max_wait_s (they are oldest first)."""
        late: list[Request] = []
        while self.queue and now - self.queue[0].arrival_s > self.max_wait_s:
            late.append(self.queue.popleft())
        self.dropped_timeout += len(late)
        return late

    @property
    def pending(self) -> int:
        """Requests waiting at the gateway: the `activationQuery` demand."""
        return len(self.queue)
