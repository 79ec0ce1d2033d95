"""The activator's rules as plain data and functions: hold, bound, reject, expire, wake and route.

No I/O and no clock of its own: every call takes `now` (seconds, any monotonic origin), so the proxy
(activator/proxy.py) and the simulator's gateway run the same rules, and tests drive them with a fake
clock.

- `HeldQueue`: one model's bounded queue of requests waiting for an endpoint. Priority classes leave in
  class order (0 first), first in first out within a class. `offer` admits or refuses (queue full),
  `pop` releases the next, `cancel` removes a request whose client went away (it is never released
  afterwards), `expire` returns those held past the maximum wait. Every operation is O(1) amortized.
- `Waker`: when to call the scaler's activation endpoint: at once when a request is held for a model
  with no ready endpoint, then again every `interval` while requests stay held (a scaler pod that
  restarted forgets an activation; the held gauge is the lasting signal).
- `pick`: the least-loaded ready endpoint, from exporter metrics when every candidate has fresh ones,
  else from the requests outstanding through this activator; saturated endpoints are skipped while
  an unsaturated one exists.
- `retry_after`: the seconds a refused client is told to wait.

The simulator's gateway (simulator/cluster/router.py) calls these same rules per request; its fluid mode, which
holds requests as arrays, calls `room` and `expiry_cutoff` (the bound and the maximum wait) on them.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

RejectReason = Literal[
    "queue_full",  # 429: the model's queue holds max_held requests already
    "max_wait",  # 503: held past max_wait with no endpoint ready
    "shutdown",  # 503: the activator is stopping and no endpoint is ready
    "unknown_model",  # 404: the body's model (or the path) names no configured model
    "bad_request",  # 400/413: a body too large or not JSON where the model must be read from it
    "upstream",  # 502: every attempt to reach an endpoint failed to connect
]
REJECT_REASONS: tuple[RejectReason, ...] = (
    "queue_full", "max_wait", "shutdown", "unknown_model", "bad_request", "upstream")
#: The HTTP status each refusal answers with.
REJECT_STATUS: dict[RejectReason, int] = {
    "queue_full": 429, "max_wait": 503, "shutdown": 503, "unknown_model": 404, "bad_request": 400, "upstream": 502}

TicketState = Literal["held", "released", "cancelled", "expired", "rejected"]


@dataclass(eq=False)
class Ticket:
    """One held request. `state` moves from held to exactly one of the others, once."""

    model: str
    priority: int
    arrived: float
    seq: int = 0
    state: TicketState = "held"
    #: What the I/O side attaches (the proxy: an asyncio future); the core never looks at it.
    handle: object = None


@dataclass(frozen=True)
class Admitted:
    ticket: Ticket


@dataclass(frozen=True)
class Refused:
    reason: RejectReason
    retry_after: int


class HeldQueue:
    """One model's bounded priority queue of held requests (see the module docstring)."""

    def __init__(self, model: str, *, max_held: int, max_wait: float, classes: int = 1) -> None:
        if max_held < 0 or classes < 1 or not max_wait > 0:
            raise ValueError("max_held >= 0, classes >= 1 and max_wait > 0")
        self.model = model
        self.max_held = max_held
        self.max_wait = max_wait
        self._lanes: list[collections.deque[Ticket]] = [collections.deque() for _ in range(classes)]
        self._held = 0
        self._seq = 0

    def __len__(self) -> int:
        """Requests held now (cancelled, expired and released ones excluded)."""
        return self._held

    def offer(self, priority: int, now: float, retry_after: int) -> Admitted | Refused:
        """Hold a new request of class `priority` (clamped to the classes there are), or refuse it."""
        if room(self._held, self.max_held) <= 0:
            return Refused("queue_full", retry_after)
        lane = min(max(priority, 0), len(self._lanes) - 1)
        self._seq += 1
        ticket = Ticket(self.model, lane, now, self._seq)
        self._lanes[lane].append(ticket)
        self._held += 1
        return Admitted(ticket)

    def requeue(self, priority: int, arrived: float) -> Ticket:
        """Hold again, at the head of its class and with its first arrival time, a request that was
        released and found its endpoint gone (the scale-down race). Over the bound if need be: it
        was admitted once and is not refused for it now."""
        lane = min(max(priority, 0), len(self._lanes) - 1)
        self._seq += 1
        ticket = Ticket(self.model, lane, arrived, self._seq)
        self._lanes[lane].appendleft(ticket)
        self._held += 1
        return ticket

    def pop(self) -> Ticket | None:
        """Release the next held request: the lowest class first, the oldest first within it."""
        for lane in self._lanes:
            while lane:
                ticket = lane.popleft()
                if ticket.state == "held":
                    ticket.state = "released"
                    self._held -= 1
                    return ticket
        return None

    def cancel(self, ticket: Ticket) -> bool:
        """Remove a held request (its client went away). False if it had left the queue already."""
        if ticket.state != "held":
            return False
        ticket.state = "cancelled"
        self._held -= 1
        self._trim(self._lanes[ticket.priority])
        return True

    def expire(self, now: float) -> list[Ticket]:
        """Take out and return every request held for `max_wait` or longer (oldest first per class)."""
        out: list[Ticket] = []
        cutoff = expiry_cutoff(now, self.max_wait)
        for lane in self._lanes:
            while lane and (lane[0].state != "held" or lane[0].arrived <= cutoff):
                ticket = lane.popleft()
                if ticket.state == "held":
                    ticket.state = "expired"
                    self._held -= 1
                    out.append(ticket)
        return out

    def take_all(self) -> list[Ticket]:
        """Take out every held request, in release order (shutdown: the caller answers each)."""
        out: list[Ticket] = []
        while (t := self.pop()) is not None:
            out.append(t)
        return out

    def held(self) -> Iterator[Ticket]:
        """The requests held now, in release order (a view: take them out with `pop`)."""
        for lane in self._lanes:
            for t in lane:
                if t.state == "held":
                    yield t

    def oldest(self) -> float | None:
        """Arrival time of the longest-held request, or None when nothing is held."""
        times = [t.arrived for lane in self._lanes for t in self._iter_held(lane)]
        return min(times) if times else None

    @staticmethod
    def _iter_held(lane: collections.deque[Ticket]) -> Iterator[Ticket]:
        for t in lane:
            if t.state == "held":
                yield t
                return

    @staticmethod
    def _trim(lane: collections.deque[Ticket]) -> None:
        # Cancelled tickets are dropped lazily; trimming both ends keeps a lane from growing with them
        # when clients that arrived last leave first (the common case: the newest give up).
        while lane and lane[-1].state != "held":
            lane.pop()
        while lane and lane[0].state != "held":
            lane.popleft()


def room(held: int, max_held: int) -> int:
    """How many more requests the queue admits: the bound, as one number (0: refuse, queue_full)."""
    return max(0, max_held - held)


def expiry_cutoff(now: float, max_wait: float) -> float:
    """A request that arrived at or before this time has waited `max_wait`: it expires now."""
    return now - max_wait


@dataclass
class Waker:
    """When to call the scaler's activation endpoint for one model (see the module docstring)."""

    interval: float
    last: float | None = None

    def due(self, now: float, held: int, ready: int) -> bool:
        """True when an activation call should go out now; the caller then calls `sent(now)`."""
        if held == 0 or ready > 0:
            return False
        return self.last is None or now - self.last >= self.interval

    def sent(self, now: float) -> None:
        self.last = now

    def reset(self) -> None:
        """An endpoint became ready: the next time the model is at zero, wake it at once."""
        self.last = None


def retry_after(now: float, woken_at: float | None, cold_start: float, floor: int = 1) -> int:
    """Seconds for `Retry-After`: what is left of the expected cold start since the model was woken
    (the whole cold start if it was not), never less than `floor`."""
    left = cold_start if woken_at is None else cold_start - (now - woken_at)
    return max(floor, math.ceil(left))


@dataclass(frozen=True)
class EndpointLoad:
    """One ready endpoint as routing sees it. `kv_usage`/`waiting`: from the exporters, None when no
    fresh sample exists; `outstanding`: requests in flight to it through this activator."""

    address: str
    outstanding: int = 0
    kv_usage: float | None = None
    waiting: float | None = None


@dataclass(frozen=True)
class RoutingRules:
    """`score = kv_usage + waiting_weight * waiting + outstanding_weight * outstanding` when every
    candidate has fresh metrics, else `outstanding`; lowest wins. `kv_saturation`: an endpoint at or
    above it is skipped while another is below. `max_outstanding`: per endpoint, 0 = no cap; with a
    cap, a request that finds every endpoint full is held (and priority decides who goes next)."""

    kv_saturation: float = 0.95
    waiting_weight: float = 0.1
    outstanding_weight: float = 0.01
    max_outstanding: int = 0


@dataclass
class Routing:
    """Holds the round-robin cursor that breaks ties, so equal endpoints share the load."""

    rules: RoutingRules = field(default_factory=RoutingRules)
    cursor: int = 0

    def pick(self, endpoints: Sequence[EndpointLoad]) -> str | None:
        i = self.pick_index(endpoints)
        return None if i is None else endpoints[i].address

    def pick_index(self, endpoints: Sequence[EndpointLoad]) -> int | None:
        chosen = pick_index(endpoints, self.rules, self.cursor)
        self.cursor += 1
        return chosen


def pick(endpoints: Sequence[EndpointLoad], rules: RoutingRules, cursor: int = 0) -> str | None:
    """The least-loaded endpoint that may take one more request, or None (hold the request)."""
    i = pick_index(endpoints, rules, cursor)
    return None if i is None else endpoints[i].address


def pick_index(endpoints: Sequence[EndpointLoad], rules: RoutingRules, cursor: int = 0) -> int | None:
    """`pick` as a position in `endpoints` (the simulator's gateway maps it back to its replica).
    Ties go to the first candidate at or after `cursor`: with cursor 0, the first listed."""
    if rules.max_outstanding <= 0:
        cands = list(range(len(endpoints)))
    else:
        cands = [i for i, e in enumerate(endpoints) if e.outstanding < rules.max_outstanding]
    if not cands:
        return None
    if len(cands) == 1:
        return cands[0]
    unsaturated = [i for i in cands if (kv := endpoints[i].kv_usage) is None or kv < rules.kv_saturation]
    if unsaturated:
        cands = unsaturated
    measured = all(endpoints[i].kv_usage is not None and endpoints[i].waiting is not None for i in cands)

    def score(e: EndpointLoad) -> float:
        if not measured:
            return float(e.outstanding)
        assert e.kv_usage is not None and e.waiting is not None
        return e.kv_usage + rules.waiting_weight * e.waiting + rules.outstanding_weight * e.outstanding

    n = len(cands)
    best = min(range(n), key=lambda j: (score(endpoints[cands[j]]), (j - cursor) % n))
    return cands[best]


@dataclass(frozen=True)
class Route:
    """Where a request goes: the configured model and the path to ask the endpoint for."""

    model: str
    path: str
    prefix: str = ""  # the path prefix that chose the model (without a trailing slash), if one did


def route_by_path(path: str, prefixes: Sequence[tuple[str, str]]) -> Route | None:
    """A model chosen by path prefix (`/llama/v1/chat/completions` -> model of `/llama`, path
    `/v1/chat/completions`), the longest prefix first; None when no prefix matches."""
    for prefix, model in sorted(prefixes, key=lambda p: -len(p[0])):
        p = prefix.rstrip("/")
        if path == p or path.startswith(p + "/"):
            return Route(model, path[len(p):] or "/", p)
    return None


def route_by_body(path: str, body_model: str | None, names: dict[str, str], default: str) -> Route | None:
    """A model chosen by the body's `model` field (`names`: served name or alias -> model), else the
    default model (when one is set and the body names none); None: no configured model."""
    if body_model is not None:
        model = names.get(body_model)
        return Route(model, path) if model is not None else None
    return Route(default, path) if default else None
