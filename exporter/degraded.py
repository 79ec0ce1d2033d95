"""Which replicas sit on a faulted GPU: NVML's facts per GPU -> `llm_replica_degraded` reasons per pod.

Pure. The exporter says only what it can see on its node, as facts with a reason; how much capacity a
degraded replica still has is the scaler's rule (scaler/health.py), because the other half of it, a
replica slower than its peers, needs every replica of the model, and the scaler is the one that sees
them all (an exporter sees the one or two replicas of its node).

A GPU is degraded for a reason while:
- `gpu_throttled`: NVML's clock event reasons hold its clocks down for a fault or heat: HW slowdown,
  SW or HW thermal, HW power brake. Not the SW power cap: a busy GPU at its power limit is the normal
  state of a loaded H100, and every replica of the model would then look degraded alike; a replica
  that the cap really slows shows up in the scaler's rate rule.
- `gpu_xid`: a critical XID event arrived within the NVML collector's hold time (`xid_active`).
- `gpu_ecc`: NVML's volatile uncorrectable ECC count is above 0 (it is cleared by a GPU reset).
A MIG slice takes its parent GPU's faults (NVML reports them per physical GPU).
"""

from __future__ import annotations

from collections.abc import Iterable

from keda_llm.common.vocabulary import DEGRADED_REASONS
from keda_llm.exporter.model import GpuMetrics

#: nvmlClocksEventReason* bits that count as `gpu_throttled`: HW slowdown 0x8, SW thermal 0x20,
#: HW thermal 0x40, HW power brake 0x80 (nvml.h).
THROTTLE_DEGRADING = 0x8 | 0x20 | 0x40 | 0x80

PodKey = tuple[str, str]  # (namespace, pod)


def gpu_reasons(gpu: GpuMetrics) -> dict[str, bool]:
    """Each DEGRADED_REASONS value -> whether this GPU has it now (unknown fields count as no fault)."""
    return {
        "gpu_throttled": bool((gpu.clock_event_reasons or 0) & THROTTLE_DEGRADING),
        "gpu_xid": bool(gpu.xid_active),
        "gpu_ecc": (gpu.ecc_uncorrected_total or 0.0) > 0,
    }


def replica_reasons(gpus: Iterable[GpuMetrics]) -> dict[PodKey, dict[str, bool]]:
    """(namespace, pod) -> reason -> active, over the GPUs (and MIG slices) attributed to each pod.

    A pod holding several GPUs has a reason when any of them has it: a tensor-parallel replica runs at
    the pace of its slowest GPU. Pods without an attributed GPU are absent (unknown, not healthy)."""
    gpus = list(gpus)
    parents = {g.index: g for g in gpus if "/" not in g.index}
    out: dict[PodKey, dict[str, bool]] = {}
    for g in gpus:
        pod = g.attribution.get("pod", "")
        if not pod:
            continue
        own = gpu_reasons(g)
        parent = parents.get(g.index.split("/", 1)[0]) if "/" in g.index else None
        if parent is not None:
            own = {r: own[r] or v for r, v in gpu_reasons(parent).items()}
        held = out.setdefault((g.attribution.get("namespace", ""), pod), dict.fromkeys(DEGRADED_REASONS, False))
        for reason, active in own.items():
            held[reason] = held[reason] or active
    return out
