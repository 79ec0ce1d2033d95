"""Knative KPA step (scaler/windows.py): one labelled case per rule of knative/serving autoscaler.go."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pytest

from keda_llm.scaler.windows import ceil_replicas, initial_panic, kpa_step

KNATIVE = {"stable_window": 60.0, "panic_threshold": 2.0, "max_scale_up_rate": 1000.0, "max_scale_down_rate": 2.0}


@dataclass(frozen=True)
class Case:
    label: str
    stable: float
    panic: float
    ready: int
    panic_since: float | None
    max_panic_pods: int
    now: float
    want: dict[str, object]
    settings: tuple[tuple[str, float], ...] = ()


CASES = [
    Case("steady: stable and panic agree with ready", 4.0, 4.0, 4, None, 0, 100.0,
         {"desired": 4, "panicking": False, "panic_since": None, "max_panic_pods": 0}),
    Case("scale up: ceil of the stable window, panic below threshold", 5.2, 7.0, 4, None, 0, 100.0,
         {"desired": 6, "dspc": 6, "dppc": 7, "panicking": False}),
    Case("scale down limited by maxScaleDownRate 2: floor(10/2) = 5", 1.0, 1.0, 10, None, 0, 100.0,
         {"desired": 5, "dspc": 1, "max_scale_down": 5, "panicking": False}),
    Case("scale up limited by maxScaleUpRate 1.5: ceil(4 x 1.5) = 6", 7.5, 7.5, 4, None, 0, 100.0,
         {"desired": 6, "dspc": 8, "max_scale_up": 6, "panicking": False},
         (("max_scale_up_rate", 1.5), ("panic_threshold", 10.0))),
    Case("zero ready counts as one: ceil(1000 x 1) up, floor(1/2) = 0 down", 0.0, 0.0, 0, None, 0, 100.0,
         {"desired": 0, "max_scale_up": 1000, "max_scale_down": 0}),
    Case("panic starts at dppc/ready >= 2 (exactly 2)", 3.0, 8.0, 4, None, 0, 100.0,
         {"desired": 8, "panicking": True, "panic_since": 100.0, "max_panic_pods": 8}),
    Case("no panic just under the threshold (7/4 < 2)", 3.0, 7.0, 4, None, 0, 100.0,
         {"desired": 3, "panicking": False, "panic_since": None}),
    Case("in panic the larger of stable and panic is taken", 9.0, 8.0, 4, 100.0, 8, 101.0,
         {"desired": 9, "panicking": True, "panic_since": 101.0, "max_panic_pods": 9}),
    Case("in panic, no scale down: max panic pods hold", 2.0, 3.0, 8, 100.0, 8, 130.0,
         {"desired": 8, "panicking": True, "panic_since": 100.0, "max_panic_pods": 8}),
    Case("panic still on exactly a stable window after the last trigger", 2.0, 3.0, 8, 100.0, 8, 160.0,
         {"desired": 8, "panicking": True, "panic_since": 100.0}),
    Case("panic ends after a full stable window without trigger; then rate-limited down", 2.0, 3.0, 8, 100.0, 8,
         160.5, {"desired": 4, "panicking": False, "panic_since": None, "max_panic_pods": 0}),
    Case("a tick over the threshold extends the panic", 2.0, 16.0, 8, 100.0, 8, 159.0,
         {"desired": 16, "panicking": True, "panic_since": 159.0, "max_panic_pods": 16}),
    Case("float noise does not add a replica", 3.0000000000000004, 3.0, 3, None, 0, 10.0,
         {"desired": 3, "dspc": 3}),
]


def diff(result: object, want: dict[str, object]) -> None:
    got = {k: v for k, v in asdict(result).items() if k in want}  # type: ignore[call-overload]
    assert got == want


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_kpa_step(case: Case) -> None:
    settings = {**KNATIVE, **dict(case.settings)}
    result = kpa_step(case.stable, case.panic, case.ready, case.panic_since, case.max_panic_pods, case.now,
                      **settings)
    diff(result, case.want)


def test_rate_limit_flags() -> None:
    up = kpa_step(7.5, 7.5, 4, None, 0, 0.0, **{**KNATIVE, "max_scale_up_rate": 1.5, "panic_threshold": 10.0})
    down = kpa_step(1.0, 1.0, 10, None, 0, 0.0, **KNATIVE)
    assert (up.rate_limited_up, up.rate_limited_down) == (True, False)
    assert (down.rate_limited_up, down.rate_limited_down) == (False, True)


def test_initial_panic_like_knative_new_autoscaler() -> None:
    # knative newAutoscaler: more than one ready pod -> start in panic holding the current count.
    assert initial_panic(3, 50.0) == (50.0, 3)
    assert initial_panic(1, 50.0) == (None, 1)
    assert initial_panic(0, 50.0) == (None, 0)


def test_ceil_replicas() -> None:
    assert [ceil_replicas(x) for x in (0.0, 0.2, 1.0, 1.000001, 2.9999, -3.0)] == [0, 1, 1, 2, 3, 0]
