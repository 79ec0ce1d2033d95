"""The field's autoscalers as simulator baselines, each from its public documentation (cited per module).

| name | anchor | runs through | knob (default) |
|---|---|---|---|
| `knative-kpa` | Knative KPA, activator, scale to zero | own loop (1 s scrape, 2 s tick) | concurrency per pod (70) |
| `aibrix-kpa` | AIBrix KPA | its own loop (10 s) | KV-cache usage per pod (0.5) |
| `aibrix-apa` | AIBrix APA | its own loop (10 s) | KV-cache usage per pod (0.5) |
| `llmd-wva` | llm-d WVA saturation V1 | KEDA + HPA (WVA reconciles every 60 s) | kvCacheThreshold (0.8) |
| `llmd-wva-tokens` | llm-d WVA saturation V2 (tokens) | KEDA + HPA | kvThreshold (0.8) |
| `dynamo-load` | Dynamo planner, load-based | its own loop (5 s) | ITL SLA (the backtest's, else 50 ms) |
| `dynamo-sla` | Dynamo planner, throughput floor (Kalman, 180 s) + load | its own loops | ITL SLA |
| `dynamo-sla-constant`, `-arima`, `-prophet` | the same with another predictor | its own loops | ITL SLA |
| `hpa-kv` | the HPA on vLLM KV-cache usage (GKE) | KEDA + HPA, 15 s scrape | KV usage per pod (0.8) |
| `ray-serve` | Ray Serve target ongoing requests | its own loop (10 s) | target_ongoing_requests (2) |

`build_anchor(name, context, knob)` builds one; `knob` None keeps the documented default. VARIANTS are
selectable anywhere a policy is, and the frontier tables sweep the others: Dynamo's ARIMA and Prophet predictors
need their libraries (extras) and cost a fit per interval, measured by hand instead (docs/simulator-results.md,
"Dynamo's predictors").
"""

from __future__ import annotations

from dataclasses import dataclass

from keda_llm.simulator.cluster.engine import Controller
from keda_llm.simulator.control.anchors import aibrix, dynamo, keda_driven, knative, ray_serve
from keda_llm.simulator.control.anchors.aibrix import AibrixAutoscaler
from keda_llm.simulator.control.anchors.dynamo import DynamoPlanner
from keda_llm.simulator.control.anchors.keda_driven import hpa_kv_anchor, wva_anchor
from keda_llm.simulator.control.anchors.knative import KnativeKpa
from keda_llm.simulator.control.anchors.ray_serve import RayServe
from keda_llm.simulator.control.controllers import KedaController
from keda_llm.simulator.hardware.perf import PerfModel
from keda_llm.simulator.hardware.replica import ReplicaConfig

ANCHORS = ("knative-kpa", "aibrix-kpa", "aibrix-apa", "llmd-wva", "llmd-wva-tokens", "dynamo-load", "dynamo-sla",
           "hpa-kv", "ray-serve", "dynamo-sla-constant", "dynamo-sla-arima", "dynamo-sla-prophet")
#: an anchor's documented option too dear to sweep on every trace: not in the frontier tables by default
VARIANTS = ("dynamo-sla-arima", "dynamo-sla-prophet")
#: Dynamo's SLA planner by its predictor (the planner's config name), each anchor's name for it
DYNAMO_SLA = {"dynamo-sla": "kalman", "dynamo-sla-constant": "constant", "dynamo-sla-arima": "arima",
              "dynamo-sla-prophet": "prophet"}
#: what each anchor's knob is, for sweeps and error messages
KNOBS = {"knative-kpa": "target concurrency per pod", "aibrix-kpa": "KV-cache usage target",
         "aibrix-apa": "KV-cache usage target", "llmd-wva": "kvCacheThreshold", "llmd-wva-tokens": "kvThreshold",
         "dynamo-load": "ITL SLA (s)", "dynamo-sla": "ITL SLA (s)", "dynamo-sla-constant": "ITL SLA (s)",
         "dynamo-sla-arima": "ITL SLA (s)", "dynamo-sla-prophet": "ITL SLA (s)",
         "hpa-kv": "KV-cache usage target per pod",
         "ray-serve": "target_ongoing_requests"}


@dataclass(frozen=True)
class AnchorContext:
    """What an anchor may need from the backtest: the replica cap, the SLO (Dynamo's SLA), and the
    replica's performance model and config (Dynamo's profiles)."""

    max_replicas: int
    slo_ttft_s: float | None = None
    slo_itl_s: float | None = None
    perf: PerfModel | None = None
    replica: ReplicaConfig | None = None


def build_anchor(name: str, context: AnchorContext, knob: float | None = None) -> Controller:
    """The controller for anchor `name`, its knob at `knob` (None: the documented default)."""
    m = context.max_replicas
    if name == "knative-kpa":
        return KnativeKpa(max_replicas=m, target=knative.CONTAINER_CONCURRENCY_TARGET_DEFAULT
                          * knative.TARGET_UTILIZATION if knob is None else knob)
    if name in ("aibrix-kpa", "aibrix-apa"):
        return AibrixAutoscaler("kpa" if name == "aibrix-kpa" else "apa", max_replicas=m,
                                target=aibrix.KV_TARGET if knob is None else knob)
    if name == "ray-serve":
        return RayServe(max_replicas=m, target=ray_serve.TARGET_ONGOING_REQUESTS if knob is None else knob)
    if name == "hpa-kv":
        so, scaler = hpa_kv_anchor(m, keda_driven.HPA_KV_TARGET if knob is None else knob)
        return KedaController(name, so, scaler, initial_replicas=1)
    if name in ("llmd-wva", "llmd-wva-tokens"):
        so, wva = wva_anchor(m, "saturation" if name == "llmd-wva" else "tokens",
                             keda_driven.KV_CACHE_THRESHOLD if knob is None else knob)
        return KedaController(name, so, wva, initial_replicas=1)
    if name.startswith("dynamo-") and name in ANCHORS:
        if context.perf is None or context.replica is None:
            raise ValueError(f"{name} needs the replica's performance model and config (its profiles)")
        ttft = dynamo.TTFT_SLA_S if context.slo_ttft_s is None else context.slo_ttft_s
        itl = knob if knob is not None else (dynamo.ITL_SLA_S if context.slo_itl_s is None else context.slo_itl_s)
        return DynamoPlanner("load" if name == "dynamo-load" else "sla", perf=context.perf, config=context.replica,
                             max_replicas=m, ttft_sla_s=ttft, itl_sla_s=itl,
                             predictor=DYNAMO_SLA.get(name, "kalman"))
    raise ValueError(f"unknown anchor {name!r}; known: {', '.join(ANCHORS)}")


__all__ = ["ANCHORS", "DYNAMO_SLA", "KNOBS", "VARIANTS", "AnchorContext", "build_anchor"]
