"""Plain data passed between the exporter's stages: parse -> normalize -> render.

Nothing here does I/O. `None` means "the engine does not report this": it renders as no series,
never as a made-up 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Sample(NamedTuple):
    """One line of an exposition body: `name{labels} value`."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: `buckets` are (upper bound, cumulative count), ending with +Inf."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass
class EngineMetrics:
    """The normalized signals of one model (and role) served by one engine endpoint."""

    engine: str
    model: str
    role: str = "unified"
    version: str | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    requests_max_running: float | None = None
    kv_cache_usage_ratio: float | None = None
    kv_cache_capacity_tokens: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    requests_finished_total: float | None = None
    prefix_cache_queried_tokens_total: float | None = None
    prefix_cache_hit_tokens_total: float | None = None
    preemptions_total: float | None = None
    time_to_first_token_seconds: Histogram | None = None
    inter_token_latency_seconds: Histogram | None = None
    # LoRA (engines that report it): distinct adapters in the running batch, distinct adapters of waiting
    # requests that are not running (they need a slot), and the adapter slots (vLLM `max_loras`).
    lora_adapters_running: float | None = None
    lora_adapters_waiting: float | None = None
    lora_adapters_max: float | None = None


@dataclass(frozen=True)
class Target:
    """An engine endpoint to scrape, with what discovery or config knows about it."""

    url: str
    namespace: str = ""
    pod: str = ""
    node: str = ""
    model: str | None = None  # the model name where the engine reports none (TGI, llama.cpp, one Triton model)
    engine: str | None = None  # force an engine type instead of detecting it from the body
    role: str | None = None
    max_running: float | None = None  # configured batch limit where the engine does not export it
    container_start: float | None = None  # unix time the serving container started (pod status)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}@{self.url}" if self.pod else self.url

    @property
    def shown_url(self) -> str:
        """The URL without its `user:password@` (the fetch sends it as Basic auth): for labels and logs."""
        return without_userinfo(self.url)


def without_userinfo(url: str) -> str:
    """`url` less any `user:password@` before its host; unchanged when it has none."""
    scheme, sep, rest = url.partition("://")
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, authority_end)
    return url if not sep or at < 0 else f"{scheme}{sep}{rest[at + 1:]}"


@dataclass
class GpuMetrics:
    """One GPU or MIG slice as NVML reports it, in base units; None = not supported on this device."""

    index: str  # "0", or "0/1" style for MIG slices (parent index / GPU instance id)
    uuid: str
    gpu_model: str
    up: bool = True
    mig_profile: str = ""
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    utilization_ratio: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules_total: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    throttled: float | None = None
    clock_event_reasons: int | None = None  # the raw nvmlClocksEventReason* bit mask behind `throttled`
    ecc_uncorrected_total: float | None = None  # volatile uncorrectable ECC errors (since the driver loaded)
    xid_errors_total: float | None = None  # critical XID events this exporter saw (None: no event set)
    last_xid: float | None = None  # the code of the last critical XID seen
    xid_active: float | None = None  # 1 while a critical XID was seen within the collector's hold time
    attribution: dict[str, str] = field(default_factory=dict)  # namespace/pod/container, if attributed
