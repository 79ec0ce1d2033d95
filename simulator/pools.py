"""Pools in the simulator: prefill/decode disaggregation and GPU variants, as a fluid model on a 1 s grid.

Beside cluster.py (one pool of identical replicas, event by event) this models a model served by
several pools, coarse enough to replay an hour in seconds:

- prefill pool: ready replicas compute prompt tokens first come first served, `prefill_tps` tokens/s
  each (the profiled single-prompt rate of the preset at the trace's mean prompt, as Dynamo's profiler
  measures it: anchors/dynamo.py); a prompt's KV then crosses to the decode pool (`transfer_latency_s`
  + its bytes / `transfer_gbps`);
- decode pool: a request is admitted when its KV (prompt + output, reserved up front) fits in the pool's
  KV cache and a batch slot is free; every admitted request makes one token per iteration, whose time
  is the preset's step time at the per-replica batch and KV (the perf model the event simulator uses);
  the first token comes one iteration after admission (TTFT = queue + prefill + transfer + admission +
  one iteration);
- unified pool (the baseline): one pool does both; prefill work takes its share of each replica's time
  first, so decode iterations stretch by 1 / (1 - that share) (chunked prefill's interference, fluid).

Replicas start after `cold_start_s`; a decode replica that still holds KV drains before it goes.
Controllers see what an exporter would report (ReplicaSamples labelled with their role) through the
scaler's own history and split (scaler/pools.py, scaler/decide.py), every KEDA polling interval.
The KEDA+HPA emulator is not in this loop: a KEDA-driven pool takes each poll's count with the HPA's
default scale-down stabilization (the largest count of the last 300 s) and no tolerance; Dynamo's
planner sets its counts directly, as it does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from keda_llm.scaler.config import ScalerConfig, parse_metadata
from keda_llm.scaler.decide import decide
from keda_llm.scaler.history import ModelHistory
from keda_llm.scaler.model import NoData, Observation, PolicyState, ReplicaSample, WorkloadState
from keda_llm.scaler.pools import pd_split, variant_split, with_peers
from keda_llm.simulator.control.anchors.dynamo import (
    KalmanPredictor,
    decode_tokens_per_s,
    disaggregated_replicas,
    prefill_tokens_per_s,
)
from keda_llm.simulator.hardware.perf import PerfModel, step_time
from keda_llm.simulator.hardware.presets import Preset
from keda_llm.simulator.workload.traces import Trace

NS, MODEL = "sim", "model"
POLL_S = 15.0  # KEDA's default pollingInterval
TRANSFER_GBPS = 25.0  # one 200 Gb/s RDMA NIC per replica, as NIXL moves KV
TRANSFER_LATENCY_S = 0.005
MAX_PREFILL_SHARE = 0.9  # a unified replica gives prefill at most this share of its time
HPA_DOWN_S = 300.0  # the HPA's default scale-down stabilization window (every KEDA-driven pool)
WARMUP_S = 60.0  # controllers act once the scaler's stable window has data


@dataclass
class Pool:
    """Replicas of one pool: ready ones (their pod names) and starting ones (when each becomes ready)."""

    pods: list[str] = field(default_factory=list)  # ready pods (their counters persist while they live)
    starting: list[tuple[float, str]] = field(default_factory=list)
    draining: int = 0
    next_pod: int = 0
    recs: list[tuple[float, int]] = field(default_factory=list)  # (when, count): HPA stabilization

    @property
    def ready(self) -> int:
        return len(self.pods)

    @property
    def spec(self) -> int:
        return self.ready + len(self.starting)

    def scale_to(self, n: int, now: float, cold_start_s: float) -> None:
        if n > self.spec:
            for _ in range(n - self.spec):
                self.starting.append((now + cold_start_s, f"r{self.next_pod}"))
                self.next_pod += 1
        elif n < self.spec:
            drop = self.spec - n
            cut = min(drop, len(self.starting))  # pods not yet ready go first, the newest first (ReplicaSet)
            self.starting = self.starting[: len(self.starting) - cut]
            gone = drop - cut
            self.draining += gone
            self.pods = self.pods[: len(self.pods) - gone]

    def recommend(self, n: int, now: float, window_s: float, cold_start_s: float) -> None:
        """The HPA's scale-down stabilization (default 300 s): the largest recommendation in the window."""
        self.recs = [(t, r) for t, r in self.recs if now - t < window_s] + [(now, n)]
        self.scale_to(max(r for _, r in self.recs), now, cold_start_s)

    def advance(self, now: float) -> None:
        self.pods += [name for at, name in self.starting if at <= now]
        self.starting = [(at, name) for at, name in self.starting if at > now]


@dataclass(frozen=True)
class PoolsResult:
    name: str
    gpu_hours: float
    ttft_p50: float
    ttft_p99: float
    itl_mean: float
    itl_p99: float  # of per-request mean inter-token latencies
    slo_attainment: float  # fraction of finished requests within both targets
    finished: int
    arrived: int
    mean_prefill: float
    mean_decode: float


Mode = Literal["unified", "fixed", "independent", "bounded", "dynamo-pd"]


@dataclass
class PdSetup:
    preset: Preset
    ttft_slo_s: float = 2.0
    itl_slo_s: float = 0.08
    cold_start_s: float = 180.0
    transfer_gbps: float = TRANSFER_GBPS
    max_replicas: int = 64
    ratio: str = "1:2"  # fixed: P:D
    ratio_bounds: tuple[str, str] = ("1:4", "1:1")  # bounded: [min, max] P:D
    prefill_share_unified: float = MAX_PREFILL_SHARE
    slo_keys: bool = True  # False: targetTimeToFirstToken only, the cold start unknown (the first tables)


class PdSimulation:
    """One controller on one trace: `run()` -> PoolsResult."""

    def __init__(self, trace: Trace, setup: PdSetup, mode: Mode) -> None:
        self.trace, self.setup, self.mode = trace, setup, mode
        p = setup.preset
        self.perf: PerfModel = p.perf()
        self.cfg = p.replica_config()
        self.kv_cap = float(p.kv_capacity_tokens)
        self.gpus = p.tp
        isl = float(np.mean(trace.prompt_tokens)) if len(trace) else 1000.0
        self.prefill_tps = prefill_tokens_per_s(self.perf, isl)
        self.kv_bytes = p.model.kv_bytes_per_token
        n = len(trace)
        self.first_token = np.full(n, math.nan)
        self.done_at = np.full(n, math.nan)
        self.kv_ready = np.full(n, math.nan)  # when a request's KV is in the decode pool (prefill + transfer)
        self.itl_sum = np.zeros(n)
        self.generated = np.zeros(n)
        self.history = ModelHistory(NS, MODEL, stale_after=30.0)
        self.counters: dict[str, list[float]] = {}  # pod -> [prompt, generation, finished]
        self.state = PolicyState()
        unified = mode == "unified"
        p0, d0 = self.warm_counts()
        self.prefill = Pool([] if unified else [f"boot{i}" for i in range(p0)], next_pod=p0 + d0)
        self.decode = Pool([f"boot{i}" for i in range(p0 + d0 if unified else d0)], next_pod=p0 + d0)
        for pool in (self.prefill, self.decode):  # as if the HPA had held the warm counts until now
            pool.recs = [(0.0, pool.ready)]
        self.gpu_s = 0.0
        self.replica_s = {"prefill": 0.0, "decode": 0.0}
        self.kalman = (KalmanPredictor(), KalmanPredictor(), KalmanPredictor())
        self._next_plan = 0.0
        self._cfg = self._config()
        self.steps = 0

    def warm_counts(self, window_s: float = 300.0) -> tuple[int, int]:
        """The pools every controller starts from (the same for all): the first `window_s` of the trace's
        prompt and output tokens/s against the profiled rates (prefill at 80%, decode at the ITL SLO)."""
        tr = self.trace
        hi = int(np.searchsorted(tr.arrival_s, window_s, "right"))
        if hi == 0:
            return 1, 1
        isl = float(np.mean(tr.prompt_tokens[:hi]))
        osl = float(np.mean(np.maximum(1, tr.output_tokens[:hi])))
        rate = hi / min(window_s, max(tr.duration_s, 1.0))
        p = math.ceil(rate * isl / (0.8 * self.prefill_tps))
        d = math.ceil(rate * osl / decode_tokens_per_s(self.perf, self.cfg, isl + osl / 2, self.setup.itl_slo_s))
        return max(1, p), max(1, d)

    # ---- the controllers ---------------------------------------------------------------------------

    def _config(self) -> ScalerConfig:
        s = self.setup
        md = {"model": MODEL, "prefillTokensPerSecond": f"{self.prefill_tps:.6g}",
              "targetTimeToFirstToken": f"{s.ttft_slo_s:g}s", "stableWindow": "60s", "panicWindow": "6s"}
        if s.slo_keys:  # the SLO and the cold start the deployment knows, told to every KEDA-driven mode alike
            md.update({"targetInterTokenLatency": f"{s.itl_slo_s * 1000:g}ms", "coldStart": f"{s.cold_start_s:g}s"})
        if self.mode == "unified":
            md.pop("prefillTokensPerSecond")  # the scaler's defaults otherwise: the product as shipped
        else:
            md["role"] = "decode"
            md["ratio"] = "independent" if self.mode == "dynamo-pd" else self.mode
            if self.mode == "fixed":
                md["prefillDecodeRatio"] = s.ratio
            if self.mode == "bounded":
                md["minPrefillDecodeRatio"], md["maxPrefillDecodeRatio"] = s.ratio_bounds
        return parse_metadata(md)

    def _control(self, now: float) -> None:
        s = self.setup
        if self.mode == "dynamo-pd":
            self._dynamo(now)
            return
        if self.mode == "unified":
            wl = WorkloadState(self.decode.spec, self.decode.ready, max_replicas=s.max_replicas)
            try:
                d, self.state = decide(self.history, self._cfg, self.state, wl, now)
            except NoData:
                return
            self.decode.recommend(max(1, min(d.replicas, s.max_replicas)), now, HPA_DOWN_S, s.cold_start_s)
            return
        try:
            counts, _ = pd_split(self.history, self._cfg, now)
        except NoData:
            return
        self.prefill.recommend(max(1, min(counts["prefill"], s.max_replicas)), now, HPA_DOWN_S, s.cold_start_s)
        self.decode.recommend(max(1, min(counts["decode"], s.max_replicas)), now, HPA_DOWN_S, s.cold_start_s)

    def _dynamo(self, now: float) -> None:
        """Dynamo's SLA planner in disaggregated mode, every 180 s: next interval's requests, ISL and OSL
        predicted (Kalman), then anchors/dynamo.py `disaggregated_replicas` (its docstring has the sources).
        No load loop here: its per-engine estimates are the aggregated engine's."""
        interval = 180.0
        if now < self._next_plan - 1e-9:
            return
        self._next_plan = now + interval
        arr = self.trace.arrival_s
        lo, hi = int(np.searchsorted(arr, now - interval, "right")), int(np.searchsorted(arr, now, "right"))
        req, isl_p, osl_p = self.kalman
        req.add(hi - lo)
        if hi > lo:
            isl_p.add(float(np.mean(self.trace.prompt_tokens[lo:hi])))
            osl_p.add(float(np.mean(np.maximum(1, self.trace.output_tokens[lo:hi]))))
        rate, isl, osl = req.predict() / interval, isl_p.predict(), osl_p.predict()
        if rate <= 0:
            return
        s = self.setup
        p, d = disaggregated_replicas(self.perf, self.cfg, rate, isl, osl, s.itl_slo_s)
        self.prefill.scale_to(max(1, min(p, s.max_replicas)), now, s.cold_start_s)
        self.decode.scale_to(max(1, min(d, s.max_replicas)), now, s.cold_start_s)

    # ---- what the exporters would report -----------------------------------------------------------

    def _sample(self, pod: str, role: str, now: float, *, running: float, waiting: float, kv_used: float,
                prompt: float, gen: float, finished: float) -> ReplicaSample:
        c = self.counters.setdefault(pod, [0.0, 0.0, 0.0])
        c[0] += prompt
        c[1] += gen
        c[2] += finished
        return ReplicaSample(pod=pod, timestamp=now, running=running, waiting=waiting,
                             max_running=float(self.cfg.max_num_seqs), kv_usage_ratio=min(1.0, kv_used / self.kv_cap),
                             kv_capacity_tokens=self.kv_cap, prompt_tokens_total=c[0], generation_tokens_total=c[1],
                             requests_finished_total=c[2], role=role)

    # ---- the run -----------------------------------------------------------------------------------

    def run(self) -> PoolsResult:
        s, tr = self.setup, self.trace
        n = len(tr)
        prompt = tr.prompt_tokens.astype(np.float64)
        out = np.maximum(1, tr.output_tokens).astype(np.float64)
        unified = self.mode == "unified"
        arrivals = np.searchsorted(tr.arrival_s, np.arange(0, math.ceil(tr.duration_s) + 2), "left")
        prefill_q: list[int] = []  # request ids waiting for prefill (FIFO)
        head_left = 0.0  # prompt tokens left of the request at the queue's head
        transfer: list[tuple[float, int]] = []  # (KV arrives at the decode pool, request)
        admit_q: list[int] = []
        resident = np.zeros(0, dtype=np.int64)
        kv_used = 0.0
        end = tr.duration_s + 600.0
        t = 0.0
        step = 0
        while t < end and (step < len(arrivals) - 1 or prefill_q or transfer or admit_q or len(resident)):
            if step < len(arrivals) - 1:
                prefill_q += range(int(arrivals[step]), int(arrivals[step + 1]))
            now = t + 1.0
            self.prefill.advance(now)
            self.decode.advance(now)
            # prefill
            servers = self.decode.ready if unified else self.prefill.ready
            share = 0.0
            budget = servers * self.prefill_tps * (s.prefill_share_unified if unified else 1.0)
            computed = 0.0
            done_prefill = 0.0
            while prefill_q and budget > 1e-9:
                i = prefill_q[0]
                left = head_left if head_left > 0 else prompt[i]
                use = min(left, budget)
                budget -= use
                computed += use
                left -= use
                if left <= 1e-9:
                    prefill_q.pop(0)
                    head_left = 0.0
                    done_prefill += 1
                    # within the step: when the budget ran to here, and never before the prompt alone could
                    at = max(now - budget / max(servers * self.prefill_tps, 1e-9),
                             float(self.trace.arrival_s[i]) + prompt[i] / self.prefill_tps)
                    delay = 0.0 if unified else TRANSFER_LATENCY_S + prompt[i] * self.kv_bytes / (s.transfer_gbps * 1e9)
                    transfer.append((at + delay, i))
                else:
                    head_left = left
            if unified and servers:
                share = computed / (servers * self.prefill_tps)
            for a, i in transfer:
                if a <= now:
                    self.kv_ready[i] = a
            admit_q += [i for a, i in transfer if a <= now]
            transfer = [(a, i) for a, i in transfer if a > now]
            # decode admission: KV (prompt + output) reserved up front, batch slots per replica
            dec = self.decode.ready
            cap, slots = dec * self.kv_cap, dec * self.cfg.max_num_seqs
            new: list[int] = []
            while (admit_q and len(resident) + len(new) < slots
                   and kv_used + prompt[admit_q[0]] + out[admit_q[0]] <= cap):
                i = admit_q.pop(0)
                kv_used += prompt[i] + out[i]
                new.append(i)
            if new:
                resident = np.concatenate([resident, np.array(new, dtype=np.int64)])
            admitted_prompt = float(sum(prompt[i] for i in new))
            gen_tokens, finished = 0.0, 0
            if len(resident) and dec:
                b = len(resident) / dec
                kv_now = float(np.sum(prompt[resident] + self.generated[resident])) / dec
                itl = step_time(self.perf, b, kv_now, kv_now + b)
                if unified:
                    itl /= max(1e-3, 1.0 - min(share, s.prefill_share_unified))
                first = np.isnan(self.first_token[resident])
                self.first_token[resident[first]] = np.maximum(self.kv_ready[resident[first]], now - 1.0) + itl
                made = np.minimum(1.0 / itl, out[resident] - self.generated[resident])
                self.generated[resident] += made
                self.itl_sum[resident] += made * itl
                gen_tokens = float(np.sum(made))
                fin = self.generated[resident] >= out[resident] - 1e-9
                if fin.any():
                    ids = resident[fin]
                    self.done_at[ids] = now
                    kv_used -= float(np.sum(prompt[ids] + out[ids]))
                    finished = int(fin.sum())
                    resident = resident[~fin]
            # draining decode replicas go once what is resident fits the rest
            if self.decode.draining and kv_used <= self.decode.ready * self.kv_cap:
                self.decode.draining = 0
            self.prefill.draining = 0
            # accounting
            self.gpu_s += (self.prefill.spec + self.decode.spec + self.decode.draining) * self.gpus
            self.replica_s["prefill"] += self.prefill.spec
            self.replica_s["decode"] += self.decode.spec
            # what the exporters report
            reps = []
            if unified:
                pods = self.decode.pods
                for pod in pods:
                    k = len(pods)
                    reps.append(self._sample("d-" + pod, "unified", now, running=len(resident) / k,
                                             waiting=(len(prefill_q) + len(admit_q)) / k, kv_used=kv_used / k,
                                             prompt=computed / k, gen=gen_tokens / k, finished=finished / k))
            else:
                for pod in self.prefill.pods:
                    k = len(self.prefill.pods)
                    reps.append(self._sample("p-" + pod, "prefill", now, running=min(1.0, len(prefill_q) / k),
                                             waiting=max(0.0, len(prefill_q) - 1) / k, kv_used=0.0,
                                             prompt=computed / k, gen=0.0, finished=done_prefill / k))
                for pod in self.decode.pods:
                    k = len(self.decode.pods)
                    reps.append(self._sample("d-" + pod, "decode", now, running=len(resident) / k,
                                             waiting=len(admit_q) / k, kv_used=kv_used / k,
                                             prompt=admitted_prompt / k,
                                             gen=gen_tokens / k, finished=finished / k))
            for pool, role, prefix in ((self.prefill, "prefill", "p-"), (self.decode, "decode", "d-")):
                for _, name in pool.starting:
                    reps.append(ReplicaSample(pod=prefix + name, timestamp=0.0, up=False,
                                              role="unified" if unified else role))
            self.history.ingest(Observation(NS, MODEL, now, tuple(reps)))
            if step % int(POLL_S) == 0 and now >= WARMUP_S:  # a stable window of data first (warm pools)
                self._control(now)
            t = now
            step += 1
        self.steps = step
        return self._result(n)

    def _result(self, n: int) -> PoolsResult:
        s = self.setup
        arrival = self.trace.arrival_s
        done = ~np.isnan(self.done_at)
        ttft = (self.first_token - arrival)[done]
        gaps = np.maximum(self.generated[done], 1.0)
        itl = self.itl_sum[done] / gaps
        ok = (ttft <= s.ttft_slo_s) & (itl <= s.itl_slo_s)
        secs = max(1, self.steps)
        return PoolsResult(
            name=self.mode, gpu_hours=self.gpu_s / 3600.0,
            ttft_p50=float(np.percentile(ttft, 50)) if len(ttft) else math.nan,
            ttft_p99=float(np.percentile(ttft, 99)) if len(ttft) else math.nan,
            itl_mean=float(np.sum(self.itl_sum[done]) / max(1.0, float(np.sum(self.generated[done])))),
            itl_p99=float(np.percentile(itl, 99)) if len(itl) else math.nan,
            slo_attainment=float(ok.mean()) if len(ok) else math.nan, finished=int(done.sum()), arrived=n,
            mean_prefill=self.replica_s["prefill"] / secs, mean_decode=self.replica_s["decode"] / secs)


def shifted_trace(conv: Trace, code: Trace, at_s: float = 1800.0) -> Trace:
    """Conversation-heavy turning code-heavy: the conversation trace before `at_s`, the code trace after
    (both Azure 2023 hours, each on its own clock), as one trace."""
    a, b = conv.window(0.0, at_s), code.window(at_s, max(code.duration_s, at_s) + 1.0)
    return Trace(f"shift({conv.name}->{code.name}@{at_s:g}s)", np.concatenate([a.arrival_s, b.arrival_s + at_s]),
                 np.concatenate([a.prompt_tokens, b.prompt_tokens]),
                 np.concatenate([a.output_tokens, b.output_tokens]))


# ---- GPU variants by cost ------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantSpec:
    """One Deployment of the model on one GPU type: its preset, price per replica-hour, and how many of its
    pods the cluster can schedule (None: any); pods beyond that stay Pending and hold no GPU."""

    name: str
    preset: Preset
    price_per_hour: float
    schedulable: int | None = None
    max_replicas: int | None = None  # declared in the variants table (`maxReplicas`): a known limit


@dataclass(frozen=True)
class VariantsResult:
    name: str
    cost: float  # price x replica-hours of scheduled pods
    gpu_hours: float
    ttft_p99: float
    itl_mean: float
    slo_attainment: float
    finished: int
    arrived: int
    mean_replicas: dict[str, float]
    pending_s: float  # pod-seconds spent Pending


class VariantsSimulation:
    """Unified replicas of several variants behind one router (fluid, 1 s): prefill work is shared in
    proportion to each variant's prefill rate, a request is admitted where its tokens come fastest (the
    variant whose iteration at its batch + 1 is shortest, with KV and a batch slot free: a load-aware
    router that knows each replica's latency), and its tokens come at that variant's iteration time.
    `controller`: `mix` (the scaler's variant split over all the variants), the name of one variant (the
    split with that variant alone: the same capacity model, one GPU type), or `tokens:<name>` (that
    variant alone under the scaler's `tokens` policy, the single-pool product as shipped)."""

    def __init__(self, trace: Trace, variants: list[VariantSpec], controller: str, *, ttft_slo_s: float = 2.0,
                 itl_slo_s: float = 0.1, cold_start_s: float = 180.0, pending_timeout_s: float = 180.0,
                 max_replicas: int = 32) -> None:
        self.trace, self.controller = trace, controller
        self.policy = controller.startswith("tokens:")
        alone = controller.removeprefix("tokens:")
        self.variants = variants if controller == "mix" else [v for v in variants if v.name == alone]
        if not self.variants:
            raise ValueError(f"controller {controller!r}: mix, one of {', '.join(v.name for v in variants)}, "
                             "or tokens:<one of them>")
        self.ttft_slo, self.itl_slo, self.cold, self.max = ttft_slo_s, itl_slo_s, cold_start_s, max_replicas
        self.pending_since: dict[str, float | None] = {v.name: None for v in self.variants}
        isl = float(np.mean(trace.prompt_tokens)) if len(trace) else 1000.0
        self.perf = {v.name: v.preset.perf() for v in self.variants}
        self.cfgs = {v.name: v.preset.replica_config() for v in self.variants}
        self.kv = {v.name: float(v.preset.kv_capacity_tokens) for v in self.variants}
        self.tps = {v.name: prefill_tokens_per_s(self.perf[v.name], isl) for v in self.variants}
        osl = float(np.mean(np.maximum(1, trace.output_tokens))) if len(trace) else 100.0
        self.gen = {v.name: decode_tokens_per_s(self.perf[v.name], self.cfgs[v.name], isl + osl / 2, itl_slo_s)
                    for v in self.variants}  # profiled, as Dynamo's profiler does (anchors/dynamo.py)
        table = "; ".join(f"{v.name} pricePerHour={v.price_per_hour:g} capacity={self.kv[v.name]:.0f} "
                          f"maxReplicas={min(max_replicas, v.max_replicas or max_replicas)} "
                          f"prefillTokensPerSecond={self.tps[v.name]:.0f} "
                          f"decodeTokensPerSecond={self.gen[v.name]:.0f}" for v in self.variants)
        md = {"model": MODEL, "targetTimeToFirstToken": f"{ttft_slo_s:g}s",
              "pendingTimeout": f"{pending_timeout_s:g}s"}
        if not self.policy:
            md.update({"variant": self.variants[0].name, "variants": table})
        self.cfg = parse_metadata(md)
        # warm start: the controller's last variant (the roomiest listed last) sized for the trace's first
        # 300 s, the others at 0
        last = self.variants[-1]
        warm = PdSimulation(trace, PdSetup(last.preset, ttft_slo_s=ttft_slo_s, itl_slo_s=itl_slo_s), "unified")
        n0 = sum(warm.warm_counts())
        self.pools = {}
        for v in self.variants:
            n = n0 if v is last else 0
            up = min(n, self._schedulable(v))  # the rest of the warm count waits Pending like any pod
            self.pools[v.name] = Pool([f"{v.name}-boot{i}" for i in range(up)], next_pod=n0,
                                      starting=[(cold_start_s, f"{v.name}-boot{i}") for i in range(up, n)],
                                      recs=[(0.0, n)])
        self.history = ModelHistory(NS, MODEL, stale_after=30.0)
        self.state = PolicyState()
        self.counters: dict[str, list[float]] = {}

    def _schedulable(self, v: VariantSpec) -> int:
        return self.max if v.schedulable is None else v.schedulable

    def _workload(self, v: VariantSpec, now: float) -> WorkloadState:
        pool = self.pools[v.name]
        stuck = max(0, pool.spec - self._schedulable(v))
        return WorkloadState(pool.spec, pool.ready, max_replicas=self.max, unscheduled=stuck,
                             unscheduled_since=self.pending_since[v.name] if stuck else None)

    def _control(self, now: float) -> None:
        if self.policy:
            v = self.variants[0]
            try:
                d, self.state = decide(self.history, self.cfg, self.state, self._workload(v, now), now)
            except NoData:
                return
            self.pools[v.name].recommend(max(1, min(d.replicas, self.max)), now, HPA_DOWN_S, self.cold)
            return
        own = self.variants[0]
        peers = {v.name: self._workload(v, now) for v in self.variants[1:]}
        wl = with_peers(self._workload(own, now), peers)
        try:
            counts, _ = variant_split(self.history, self.cfg, wl, now)
        except NoData:
            return
        for v in self.variants:
            self.pools[v.name].recommend(min(counts[v.name], self.max), now, HPA_DOWN_S, self.cold)
        if sum(p.spec for p in self.pools.values()) == 0:
            self.pools[own.name].recommend(1, now, HPA_DOWN_S, self.cold)

    def run(self) -> VariantsResult:
        tr = self.trace
        n = len(tr)
        prompt = tr.prompt_tokens.astype(np.float64)
        out = np.maximum(1, tr.output_tokens).astype(np.float64)
        first, done_at = np.full(n, math.nan), np.full(n, math.nan)
        itl_sum, generated = np.zeros(n), np.zeros(n)
        arrivals = np.searchsorted(tr.arrival_s, np.arange(0, math.ceil(tr.duration_s) + 2), "left")
        queue: list[int] = []
        head_left = 0.0
        admit_q: list[int] = []
        ready_at = np.full(n, math.nan)
        resident = {v.name: np.zeros(0, dtype=np.int64) for v in self.variants}
        kv_used = {v.name: 0.0 for v in self.variants}
        cost = gpu_s = pending_s = 0.0
        replica_s = {v.name: 0.0 for v in self.variants}
        t, step, end = 0.0, 0, tr.duration_s + 600.0
        while t < end and (step < len(arrivals) - 1 or queue or admit_q or any(len(r) for r in resident.values())):
            if step < len(arrivals) - 1:
                queue += range(int(arrivals[step]), int(arrivals[step + 1]))
            now = t + 1.0
            for v in self.variants:  # pods past what the cluster can schedule stay Pending
                pool = self.pools[v.name]
                room = self._schedulable(v) - pool.ready
                starting = sorted(pool.starting)
                placed, waiting = starting[:max(0, room)], starting[max(0, room):]
                pool.starting = placed
                pool.advance(now)
                pool.starting += [(max(at, now + self.cold), name) for at, name in waiting]
                stuck = max(0, pool.spec - self._schedulable(v))
                since = self.pending_since[v.name]
                self.pending_since[v.name] = (since if since is not None else now) if stuck else None
                pending_s += stuck
            # prefill, shared by every ready replica in proportion to its rate
            rate = sum(self.pools[v.name].ready * self.tps[v.name] for v in self.variants)
            budget = rate * MAX_PREFILL_SHARE
            computed = 0.0
            while queue and budget > 1e-9:
                i = queue[0]
                left = head_left if head_left > 0 else prompt[i]
                use = min(left, budget)
                budget, computed, left = budget - use, computed + use, left - use
                if left <= 1e-9:
                    queue.pop(0)
                    head_left = 0.0
                    ready_at[i] = max(now - budget / max(rate, 1e-9), float(tr.arrival_s[i]))
                    admit_q.append(i)
                else:
                    head_left = left
            share = computed / rate if rate else 0.0
            # admission: where the request's tokens come fastest, among the variants with room for it
            while admit_q:
                i = admit_q[0]
                best, name = math.inf, ""
                for v in self.variants:
                    pool, res = self.pools[v.name], resident[v.name]
                    if (not pool.ready or pool.ready * self.kv[v.name] - kv_used[v.name] < prompt[i] + out[i]
                            or len(res) >= pool.ready * self.cfgs[v.name].max_num_seqs):
                        continue
                    b = (len(res) + 1) / pool.ready
                    kv_b = (kv_used[v.name] + prompt[i] + out[i]) / pool.ready
                    it = step_time(self.perf[v.name], b, kv_b, kv_b + b)
                    if it < best:
                        best, name = it, v.name
                if not name:
                    break
                admit_q.pop(0)
                kv_used[name] += prompt[i] + out[i]
                resident[name] = np.append(resident[name], i)
            reps: list[ReplicaSample] = []
            for v in self.variants:
                pool, res = self.pools[v.name], resident[v.name]
                made_total, fin_n = 0.0, 0
                serving = pool.ready + pool.draining  # a removed replica finishes what it holds, taking no more
                if len(res) and serving:
                    b = len(res) / serving
                    kv_now = float(np.sum(prompt[res] + generated[res])) / serving
                    itl = step_time(self.perf[v.name], b, kv_now, kv_now + b) / max(1e-3, 1.0 - min(share, 0.9))
                    new = np.isnan(first[res])
                    first[res[new]] = np.maximum(ready_at[res[new]], now - 1.0) + itl
                    made = np.minimum(1.0 / itl, out[res] - generated[res])
                    generated[res] += made
                    itl_sum[res] += made * itl
                    made_total = float(np.sum(made))
                    fin = generated[res] >= out[res] - 1e-9
                    if fin.any():
                        done_at[res[fin]] = now
                        kv_used[v.name] -= float(np.sum(prompt[res[fin]] + out[res[fin]]))
                        fin_n = int(fin.sum())
                        resident[v.name] = res[~fin]
                if pool.draining and kv_used[v.name] <= pool.ready * self.kv[v.name]:
                    pool.draining = 0  # what is resident fits the replicas that stay
                scheduled = min(pool.spec, self._schedulable(v)) + pool.draining
                cost += scheduled * v.price_per_hour / 3600.0
                gpu_s += scheduled * v.preset.tp
                replica_s[v.name] += scheduled
                k = max(1, pool.ready)
                total_ready = sum(self.pools[u.name].ready for u in self.variants) or 1
                for pod in pool.pods:
                    c = self.counters.setdefault(pod, [0.0, 0.0, 0.0])
                    c[0] += computed / total_ready
                    c[1] += made_total / k
                    c[2] += fin_n / k
                    reps.append(ReplicaSample(
                        pod=pod, timestamp=now, running=len(resident[v.name]) / k,
                        waiting=(len(queue) + len(admit_q)) / total_ready,
                        max_running=float(self.cfgs[v.name].max_num_seqs),
                        kv_usage_ratio=min(1.0, kv_used[v.name] / (k * self.kv[v.name])),
                        kv_capacity_tokens=self.kv[v.name], prompt_tokens_total=c[0], generation_tokens_total=c[1],
                        requests_finished_total=c[2]))
                for _, name in pool.starting[: max(0, self._schedulable(v) - pool.ready)]:
                    reps.append(ReplicaSample(pod=name, timestamp=0.0, up=False))  # scheduled, loading
            self.history.ingest(Observation(NS, MODEL, now, tuple(reps)))
            if step % int(POLL_S) == 0 and now >= WARMUP_S:
                self._control(now)
            t = now
            step += 1
        done = ~np.isnan(done_at)
        ttft = (first - tr.arrival_s)[done]
        itl_req = itl_sum[done] / np.maximum(generated[done], 1.0)
        ok = (ttft <= self.ttft_slo) & (itl_req <= self.itl_slo)
        secs = max(1, step)
        return VariantsResult(
            name=self.controller, cost=cost, gpu_hours=gpu_s / 3600.0,
            ttft_p99=float(np.percentile(ttft, 99)) if len(ttft) else math.nan,
            itl_mean=float(np.sum(itl_sum[done]) / max(1.0, float(np.sum(generated[done])))),
            slo_attainment=float(ok.mean()) if len(ok) else math.nan, finished=int(done.sum()), arrived=n,
            mean_replicas={k: v / secs for k, v in replica_s.items()}, pending_s=pending_s)
