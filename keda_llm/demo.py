"""`keda-llm demo`: the whole loop, live, in one process on loopback.

What is real and what is simulated:
- real: the exporter (scraping every replica's /metrics, discovering replicas from a pod list, reading
  GPUs through NVML calls), the scaler (assembled as `keda-llm scaler` assembles it: its exporters
  source, history, policy, gRPC ExternalScaler server and HTTP side with POST /v1/activate), the
  activator (`keda-llm activator`'s proxy, `demo_traffic`: every request of the load goes through it
  as real HTTP, held while no pod is ready, refused past its bound with Retry-After, forwarded to the
  pods' HTTP endpoints; it wakes the model through the scaler), the load's HTTP client, every HTTP and
  gRPC hop;
- simulated, by the simulator the backtests run (`simulator.cluster.engine.Simulation`, advanced to the wall
  clock): the Deployment's pods (cold start, readiness, the ReplicaSet's choice of pods to delete on
  scale-down, draining), the engines (`simulator.hardware.replica.Replica`; each pod answers /v1/completions from
  its simulated engine and serves vLLM-format /metrics derived from its state, `demo_engine`), and KEDA
  + the HPA (`simulator.control.controllers.KedaController` over the project's emulator), which calls the real
  scaler over gRPC with KEDA's call pattern. The GPUs are a fake NVML.

Timings are real seconds. The windows, intervals and the HPA sync are shortened so that a
three-minute run shows scale up, scale down, scale to zero and back; `--duration` compresses or
stretches the whole script, the timings and the engine speed together.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from keda_llm.activator.config import ActivatorConfig
from keda_llm.activator.config import parse as parse_activator_config
from keda_llm.demo_engine import BadRequest, EngineServer, Latency, render
from keda_llm.demo_traffic import Load, LoadStats, LoopThread, RunningActivator, Send, start_activator, stop_activator
from keda_llm.scaler.assembly import ScalerSettings, ScalerThread, start_in_thread
from keda_llm.scaler.model import WorkloadState
from keda_llm.simulator.cluster.detailed import DetailedBackend
from keda_llm.simulator.cluster.engine import SimConfig, Simulation
from keda_llm.simulator.cluster.pods import Phase as PodPhase
from keda_llm.simulator.cluster.pods import SimReplica
from keda_llm.simulator.control import parse_scaledobjects
from keda_llm.simulator.control.controllers import KedaController
from keda_llm.simulator.control.grpc_scaler import GrpcExternalScaler
from keda_llm.simulator.control.scaler import workload_state
from keda_llm.simulator.hardware.coldstart import ColdStartAssumptions, ColdStartModel
from keda_llm.simulator.hardware.coldstart import Phase as ColdStartPhase
from keda_llm.simulator.hardware.perf import ConstantPerf
from keda_llm.simulator.hardware.replica import ReplicaConfig, Request
from keda_llm.simulator.workload.traces import Trace

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NAMESPACE = "demo"
NAME = "llama-8b"  # the ScaledObject and its Deployment
NODE = "demo-node"
DEFAULT_DURATION = 180.0
GIB = 1024**3
MIB = 1024**2
#: The cold start's phases as shares of `Scenario.cold_start` (node, image, weights, engine init: the four
#: levers of docs/design.md), and the weights phase when the exporter warmed them into the page cache:
#: storage bandwidth over page-cache bandwidth (simulator/hardware/coldstart.py's assumptions and their sources).
COLD_PHASES = (("scheduling", 1 / 9), ("image_pull", 2 / 9), ("weight_load", 5 / 9), ("warmup", 1 / 9))
_CS = ColdStartAssumptions()
WARM_WEIGHTS_FACTOR = _CS.storage_bandwidth / _CS.page_cache_bandwidth
WEIGHTS_BYTES = 16 * MIB  # the demo's stand-in weight file, read by the exporter's POST /v1/warm
EXAMPLE_WARM_PATH = "/models/llama-8b"
#: The engines' decode runs end at least this often (simulated seconds): a request can come in over HTTP
#: at any moment, and joins the batch at the next iteration boundary, as in vLLM.
STEP_S = 0.05

log = logging.getLogger("keda_llm.demo")


# ---------------------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class Phase:
    """Load from `start` to `end` seconds, ramping linearly from `rate0` to `rate1` requests/s."""

    name: str
    start: float
    end: float
    rate0: float
    rate1: float


@dataclass(frozen=True)
class Scenario:
    """Everything the run depends on, in seconds at the default duration; `scaled()` compresses it."""

    duration: float = DEFAULT_DURATION
    phases: tuple[Phase, ...] = (
        Phase("idle", 0, 12, 0.3, 0.3),
        Phase("ramp", 12, 45, 0.3, 5.0),
        Phase("spike", 45, 60, 10.0, 10.0),
        Phase("steady", 60, 90, 5.0, 5.0),
        Phase("quiet", 90, 150, 0.0, 0.0),
        Phase("burst at zero", 150, 170, 2.0, 2.0),
        Phase("drain", 170, 180, 0.0, 0.0),
    )
    burst_at: float = 150.0  # a burst of `burst_requests` over `burst_s` on top of the phase's rate
    burst_requests: int = 16
    burst_s: float = 2.0
    # the activator: its bound on held requests is under the burst, so that the rest of the burst is
    # answered 429 with Retry-After (and sent again by the client after it)
    max_held: int = 12
    max_wait: float = 60.0
    probe_interval: float = 0.25  # its /health probes of the pods' static endpoints
    # engines (per replica)
    max_num_seqs: int = 16
    num_blocks: int = 640
    block_size: int = 16
    decode_tokens_per_s: float = 40.0
    prompt_tokens: tuple[int, int] = (200, 800)
    output_tokens: tuple[int, int] = (60, 200)
    cold_start: float = 9.0
    initial_replicas: int = 1
    # KEDA, HPA, scaler, exporter
    max_replicas: int = 6
    polling_interval: int = 2
    cooldown: int = 10
    hpa_sync: float = 5.0
    scale_down_stabilization: int = 15
    stable_window: float = 20.0
    panic_window: float = 4.0
    idle_timeout: float = 20.0
    target_kv_utilization: float = 0.8
    activation_hold: float = 30.0
    exporter_interval: float = 1.0
    scaler_interval: float = 1.0
    scaler_tick: float = 1.0
    activation_interval: float = 5.0  # the activator's: POST /v1/activate again while it still holds
    seed: int = 7

    def scaled(self, duration: float) -> Scenario:
        """The same story in `duration` seconds: times x f, rates and engine speed / f (f = duration / default).

        Floors keep each knob valid: KEDA's intervals are whole seconds, the scaler's history has 1 s
        buckets (panic window >= 2 s) and Knative's stable window is at least 6 s.
        """
        f = duration / self.duration
        if f == 1.0:
            return self
        return replace(
            self,
            duration=duration,
            phases=tuple(Phase(p.name, p.start * f, p.end * f, p.rate0 / f, p.rate1 / f) for p in self.phases),
            burst_at=self.burst_at * f,
            burst_requests=max(1, round(self.burst_requests / min(f, 1.0))),
            max_held=max(1, round(self.max_held / min(f, 1.0))),
            max_wait=max(20.0, self.max_wait * f),
            burst_s=max(0.5, self.burst_s * f),
            decode_tokens_per_s=self.decode_tokens_per_s / f,
            cold_start=max(1.0, self.cold_start * f),
            polling_interval=max(1, round(self.polling_interval * f)),
            cooldown=max(1, round(self.cooldown * f)),
            hpa_sync=max(1.0, self.hpa_sync * f),
            scale_down_stabilization=max(1, round(self.scale_down_stabilization * f)),
            stable_window=max(6.0, self.stable_window * f),
            panic_window=max(2.0, self.panic_window * f),
            idle_timeout=max(2.0, self.idle_timeout * f),
            activation_hold=max(5.0, self.activation_hold * f),
            exporter_interval=max(0.5, self.exporter_interval * f),
            scaler_interval=max(0.5, self.scaler_interval * f),
            scaler_tick=max(0.5, self.scaler_tick * f),
            activation_interval=max(1.0, self.activation_interval * f),
        )

    def phase_at(self, t: float) -> Phase:
        for p in self.phases:
            if p.start <= t < p.end:
                return p
        return self.phases[-1]

    def rate(self, t: float) -> float:
        p = self.phase_at(t)
        if not p.start <= t < p.end:
            return 0.0
        return p.rate0 + (p.rate1 - p.rate0) * (t - p.start) / (p.end - p.start)


@dataclass(frozen=True)
class Arrival:
    at: float
    prompt: int
    output: int


def arrivals(sc: Scenario) -> list[Arrival]:
    """The whole request schedule, drawn once from the seed: Poisson per 50 ms slot, plus the burst."""
    rng = np.random.default_rng(sc.seed)
    slot = 0.05
    out: list[Arrival] = []

    def draw(at: float) -> Arrival:
        return Arrival(at, int(rng.integers(*sc.prompt_tokens)), int(rng.integers(*sc.output_tokens)))

    for i in range(int(sc.duration / slot)):
        t = i * slot
        for _ in range(int(rng.poisson(sc.rate(t) * slot))):
            out.append(draw(t + float(rng.uniform(0, slot))))
    for i in range(sc.burst_requests):
        out.append(draw(sc.burst_at + sc.burst_s * i / sc.burst_requests))
    out.sort(key=lambda a: a.at)
    return out


# ------------------------------------------------------------------------------------ the world


def schedule(sc: Scenario) -> list[Send]:
    """The arrivals as the load's HTTP client sends them (seconds on the demo's clock)."""
    return [Send(a.at, a.prompt, a.output) for a in arrivals(sc)]


def cold_phases(sc: Scenario) -> dict[str, float]:
    """Seconds of each cold-start phase with cold weights (read from storage)."""
    return {name: share * sc.cold_start for name, share in COLD_PHASES}


def sim_config(sc: Scenario) -> SimConfig:
    """The simulator's cluster for the demo: a small, slow vLLM-like replica and a fixed cold start in
    four phases (COLD_PHASES); the weights phase is shortened by the World when the exporter warmed them.

    Step time = (1 + 0.002 per token computed + 0.00005 per KV token read) / decode_tokens_per_s: a
    lone sequence decodes at `decode_tokens_per_s` and a full batch of 600-token contexts about 1.5x
    slower per step (decode is memory-bound); a 500-token prompt costs one more step."""
    base = 1.0 / sc.decode_tokens_per_s
    replica = ReplicaConfig(max_num_seqs=sc.max_num_seqs, max_num_batched_tokens=2048, kv_blocks=sc.num_blocks,
                            block_size=sc.block_size, enable_prefix_caching=False)
    cold = ColdStartModel("demo", tuple(ColdStartPhase(name, share * sc.cold_start, share * sc.cold_start)
                                        for name, share in COLD_PHASES))
    return SimConfig(replica, ConstantPerf(base_s=base, per_token_s=0.002 * base, per_kv_token_s=5e-5 * base), cold,
                     collection_interval_s=1.0, seed=sc.seed, namespace=NAMESPACE, model=MODEL)


class HttpBackend(DetailedBackend):
    """The detailed backend with its requests coming from outside: each request a pod receives over HTTP is
    handed to that pod's engine at the simulation's now (`submit`).

    No arrival time is known in advance, so the engines' runs of decode iterations end every STEP_S: a
    request that comes in joins the batch at the next iteration boundary."""

    def submit(self, req: Request, r: SimReplica) -> bool:
        """`req` arrives now at pod `r`; False if the pod is gone or loading, or the request can never fit."""
        sim = self.sim
        if r.phase not in (PodPhase.READY, PodPhase.DRAINING) or not sim.cluster.route_to(r, req, self.loop.now):
            return False
        sim.requests.append(req)
        self._open += 1
        self._arrivals_since += 1
        if not r.stepping:
            self._step(r)
        return True

    def _next_arrival_time(self) -> float:
        return self.loop.now + STEP_S


class HttpSimulation(Simulation):
    """The simulator's Simulation with an empty trace and the HTTP backend: its requests come from outside."""

    def __init__(self, config: SimConfig, controller: Any) -> None:
        empty = Trace("demo", np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))
        super().__init__(empty, config, controller, backend=HttpBackend)
        assert isinstance(self.backend, HttpBackend)
        self.http: HttpBackend = self.backend

    def submit(self, req: Request, r: SimReplica) -> bool:
        """`req` arrives now at pod `r` (HttpBackend.submit)."""
        return self.http.submit(req, r)


@dataclass
class Pod:
    """The demo's view of one simulated replica: its name, its GPU (and slot), its HTTP server and histograms."""

    name: str
    gpu: int
    server: EngineServer
    latency: Latency
    created_unix: float
    draining: bool = False
    phases: dict[str, float] = field(default_factory=dict)  # the cold start as it went (none: started before)
    weights_warm: bool | None = None  # decided when the pod reaches its weights phase


@dataclass
class Stats:
    """What the world counted; the requests' own numbers are the load's (`LoadStats`, from HTTP answers)."""

    engine_finished: int = 0  # requests the simulated engines finished
    zero_seconds: float = 0.0
    pods_started: int = 0
    warm_jobs: list[dict[str, Any]] = field(default_factory=list)  # the exporter's /v1/warm jobs, as it lists them
    cold_starts: list[tuple[str, dict[str, float], bool]] = field(default_factory=list)  # (pod, phases, warm)


Event = Callable[[str], None]


class EngineGone(ConnectionError):
    """The pod's engine went away (the demo ended) while a request waited on it."""


class _PodServing:
    """One pod's HTTP side into the world (demo_engine.Serving): ready while the pod is, requests to its engine."""

    def __init__(self, world: World, index: int) -> None:
        self._world = world
        self._index = index

    def ready(self) -> bool:
        pod = self._world.pods.get(self._index)
        return pod is not None and pod.server.serving and not pod.draining

    def submit(self, prompt_tokens: int, max_tokens: int) -> Request | None:
        return self._world.submit(self._index, prompt_tokens, max_tokens)

    def progress(self, request: Request, seen: int, timeout: float) -> tuple[int, bool]:
        return self._world.progress(request, seen, timeout)


class World:
    """The simulator's own world on the wall clock: `HttpSimulation` (its Cluster, Replica engines, pod
    lifecycle and scale-down rule, and a KedaController) advanced to the demo's time by `advance(now)`;
    each simulated replica serves its engine over HTTP on loopback (`demo_engine.EngineServer`).

    Pods take slots: a slot is one fixed port on loopback, and one of the activator's static endpoints.
    A free slot's port is held by a bound socket that does not listen, so the activator's probes and
    requests are refused there (as at a pod that is not there); a pod's server binds it when the pod is
    created and listens once the pod is ready, as vLLM opens its port once loaded.

    Everything here is guarded by `lock`. The scaler reads the Deployment from `workload` (published after
    each step, read without the lock: KEDA's calls are made while the world holds it).

    The simulation's clock runs `lead` (under one pollingInterval) ahead of the demo's: the ScaledObject
    exists before the script starts, and the burst arrives midway between two of KEDA's polls, so that
    the activator's activation push, not a poll at the same instant, wakes the model."""

    def __init__(self, sc: Scenario, event: Event, gpus: list[Any]) -> None:
        self.sc = sc
        #: whether the node's page cache holds the model's weights now (the exporter's /v1/warm done)
        self.weights_warm: Callable[[], bool] = lambda: False
        p = sc.polling_interval
        self.lead = (0.5 * p - sc.burst_at) % p  # the burst's first request lands half a poll after a poll
        self.lock = threading.Lock()
        self.progressed = threading.Condition()  # notified after each step of the world
        self._event = event
        self.gpus = gpus
        self.stats = Stats()
        self.sim: HttpSimulation | None = None
        self.controller: KedaController | None = None
        self.pods: dict[int, Pod] = {}  # by the simulated replica's index
        self.workload: WorkloadState | None = None
        self.pods_changed = threading.Event()
        self.closed = False
        self._settings: Any = None
        self._scaler: GrpcExternalScaler | None = None
        self._seen_events = 0
        self._new_control: list[Any] = []
        self._last: float | None = None
        self._t0_unix = time.time()
        self._rid = 0
        # the slots: one port each, held by a bound socket while no pod has it
        self._slots_lock = threading.Lock()
        self._free: dict[int, socket.socket] = {}
        self.ports: list[int] = []
        for i in range(len(gpus) + sc.max_replicas + 1):
            sock = _hold_port(0)
            self.ports.append(int(sock.getsockname()[1]))
            self._free[i] = sock

    def endpoints(self) -> list[str]:
        """The pods' slots as base URLs: the activator's static endpoints."""
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    # -- set up ----------------------------------------------------------------------------------

    def begin(self, controller: Any, settings: Any = None, scaler: GrpcExternalScaler | None = None) -> None:
        """Make the simulation with `controller` and put it at time 0 (its initial pods ready, warm)."""
        with self.lock:
            self.controller = controller if isinstance(controller, KedaController) else None
            self._settings, self._scaler = settings, scaler
            self.sim = HttpSimulation(sim_config(self.sc), controller)
            self.sim.on_finished = self._finished
            self.sim.begin()
            self._t0_unix = time.time()
            self._sync(0.0, warm=True)

    def close(self) -> None:
        with self.lock:
            pods, self.pods = list(self.pods.values()), {}
            self.closed = True
        with self.progressed:
            self.progressed.notify_all()
        for p in pods:
            p.server.stop()
        with self._slots_lock:
            for sock in self._free.values():
                sock.close()
            self._free.clear()

    # -- requests, from the pods' HTTP side ------------------------------------------------------

    def submit(self, index: int, prompt_tokens: int, max_tokens: int) -> Request | None:
        """A request that came in to pod `index`, handed to its engine now; None if the pod is gone.
        BadRequest if it can never fit the engine's KV cache (vLLM answers 400 too)."""
        with self.lock:
            sim = self.sim
            r = None if sim is None or self.closed else next(
                (x for x in sim.cluster.replicas if x.index == index), None)
            if sim is None or r is None:
                return None
            req = Request(self._rid + 1, sim.now, prompt_tokens, max_tokens)
            if not r.engine.fits(req):
                cap = r.engine.config.kv_capacity_tokens
                raise BadRequest(f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) is more than the "
                                 f"engine's KV cache holds ({cap} tokens)")
            self._rid += 1
            return req if sim.submit(req, r) else None

    def progress(self, req: Request, seen: int, timeout: float) -> tuple[int, bool]:
        """Tokens the engine has emitted of `req` by the simulation's now, and whether it finished; waits
        (up to `timeout`) for more than `seen` of them. Raises EngineGone once the world is closed."""

        def emitted() -> tuple[int, bool]:
            sim = self.sim
            now = -math.inf if sim is None else sim.now
            if req.finish_s is not None and req.finish_s <= now:
                return req.target_output, True
            if req.first_token_s is None or req.first_token_s > now:
                return 0, False
            return max(1, min(req._generated, req.target_output - 1)), False

        with self.progressed:
            self.progressed.wait_for(lambda: self.closed or emitted() != (seen, False), timeout)
        if self.closed:
            raise EngineGone(f"request {req.rid}: the demo ended")
        return emitted()

    # -- time passes -----------------------------------------------------------------------------

    def advance(self, now: float) -> list[Any]:
        """Run the simulation to `now`; returns the KEDA/HPA events of the step. A StreamIsActive message
        that came in is acted on at once, as KEDA's push loop does (a controller tick of its own)."""
        with self.lock:
            sim = self.sim
            assert sim is not None, "begin() first"
            sim.advance_to(now + self.lead)
            if self.controller is not None and self._scaler is not None and self._scaler.wait_for_push(0):
                self.controller.tick(sim)
            self._load_weights(sim)
            self._sync(sim.now)
            out, self._new_control = self._new_control, []
        with self.progressed:
            self.progressed.notify_all()
        return out

    def _load_weights(self, sim: Simulation) -> None:
        """Pods that reached their weights phase: if the node's page cache holds the weights (the exporter
        read them on the scaler's POST /v1/warm), the phase takes the page-cache time, so the pod is ready
        sooner; else it reads them from storage, as planned."""
        phases = cold_phases(self.sc)
        for r in sim.cluster.replicas:
            pod = self.pods.get(r.index)
            if pod is None or not r.starting or pod.weights_warm is not None:
                continue
            weights_at = r.scheduled_at + phases["image_pull"]
            if sim.now < weights_at:
                continue
            pod.weights_warm = self.weights_warm()
            pod.phases = dict(phases)
            if pod.weights_warm:
                pod.phases["weight_load"] = phases["weight_load"] * WARM_WEIGHTS_FACTOR
                sim.move_ready(r, weights_at + pod.phases["weight_load"] + phases["warmup"])
                self._event(f"pod {pod.name} loading weights: in the node's page cache (warmed by the exporter), "
                            f"{pod.phases['weight_load']:.2f} s instead of {phases['weight_load']:.2f} s from storage")
            else:
                self._event(f"pod {pod.name} loading weights from storage ({phases['weight_load']:.2f} s): not warmed")

    def _finished(self, r: SimReplica, finished: list[Request]) -> None:
        pod = self.pods.get(r.index)
        if pod is not None:
            pod.latency.add(finished)
        self.stats.engine_finished += len(finished)

    def _sync(self, now: float, warm: bool = False) -> None:
        """Bring the pods' servers, the GPUs and the published state in line with the simulation."""
        sim = self.sim
        assert sim is not None
        changed = False
        live = {r.index: r for r in sim.cluster.replicas}
        for idx, r in live.items():
            pod = self.pods.get(idx)
            if pod is None:
                pod = self.pods[idx] = self._new_pod(r, warm)
                changed = True
                ph = cold_phases(self.sc)
                self._event(f"pod {pod.name} running (started before the demo)" if warm else
                            f"pod {pod.name} created: cold start phases scheduling {ph['scheduling']:.2f} s, "
                            f"image {ph['image_pull']:.2f} s, then weights and engine init")
            if r.phase is PodPhase.READY and not pod.server.serving:
                pod.server.start()
                changed = True
                if not warm:
                    ph = pod.phases or cold_phases(self.sc)
                    warmth = " (warm)" if pod.weights_warm else ""
                    self.stats.cold_starts.append((pod.name, dict(ph), bool(pod.weights_warm)))
                    self._event(f"pod {pod.name} ready after {r.startup_seconds:.2f} s: scheduling "
                                f"{ph['scheduling']:.2f} + image {ph['image_pull']:.2f} + weights "
                                f"{ph['weight_load']:.2f}{warmth} + engine init {ph['warmup']:.2f} s")
            if r.phase is PodPhase.DRAINING and not pod.draining:
                pod.draining = True
                self._event(f"pod {pod.name} terminating: draining {r.outstanding} requests")
        for idx in [i for i in self.pods if i not in live]:
            pod = self.pods.pop(idx)
            changed = True
            was = "stopped" if pod.draining else ("terminated" if pod.server.serving else "deleted while loading")
            self._event(f"pod {pod.name} {was}")
            threading.Thread(target=self._free_slot, args=(pod,), name="pod-stop", daemon=True).start()
        if changed:
            self.pods_changed.set()
        if self.controller is not None:
            events = self.controller.events
            self._new_control.extend(events[self._seen_events:])
            self._seen_events = len(events)
        self.stats.pods_started = sim.cluster.stats.cold_starts
        if self._settings is not None:
            self.workload = workload_state(self._settings, sim)
        self._animate_gpus(0.0 if self._last is None else now - self._last)
        self._last = now

    def _new_pod(self, r: SimReplica, warm: bool) -> Pod:
        """A pod in the first free slot (its GPU, its port): the slot's socket gives way to its server's."""
        latency = Latency()
        with self._slots_lock:
            if not self._free:
                raise RuntimeError(f"every one of the {len(self.ports)} pod slots is taken")
            slot = min(self._free)
            self._free.pop(slot).close()
            server = EngineServer(lambda: render(MODEL, r.engine, latency), self.lock, port=self.ports[slot],
                                  serving=_PodServing(self, r.index), model=MODEL)
        created = self._t0_unix + r.created_at - (3600.0 if warm else 0.0)  # warm: started long before
        return Pod(f"{NAME}-{r.index + 1}", slot, server, latency, created)

    def _free_slot(self, pod: Pod) -> None:
        """The pod is gone: its server closes, and its slot's port is held again for the next pod."""
        pod.server.stop()
        with self._slots_lock:
            if self.closed:
                return
            try:
                self._free[pod.gpu] = _hold_port(self.ports[pod.gpu])
            except OSError as e:  # another socket took the port meanwhile: the slot is lost, its endpoint refuses
                log.warning("pod slot %d: port %d cannot be held again: %s", pod.gpu, self.ports[pod.gpu], e)

    def _animate_gpus(self, dt: float) -> None:
        sim = self.sim
        assert sim is not None
        by_gpu = {p.gpu: r for r in sim.cluster.replicas if (p := self.pods.get(r.index)) is not None}
        for i, g in enumerate(self.gpus):
            r = by_gpu.get(i)
            if r is None:
                g.memory_used, g.utilization_gpu, g.power_mw = GIB // 2, 0, 70_000
            elif r.starting:  # loading weights
                g.memory_used, g.utilization_gpu, g.power_mw = 16 * GIB, 5, 120_000
            else:
                busy = r.engine.num_running / self.sc.max_num_seqs
                g.memory_used = int((17 + 55 * r.engine.kv_usage) * GIB)
                g.utilization_gpu = min(100, round(100 * busy))
                g.power_mw = int(100_000 + 550_000 * busy)
            g.energy_mj += int(g.power_mw * dt)

    def finish(self) -> None:
        """The end of the run: time at zero counted up to now."""
        with self.lock:
            if self.sim is not None:
                self.sim.cluster.close(self.sim.now)
                self.stats.zero_seconds = self.sim.cluster.stats.zero_seconds

    # -- what Kubernetes would say ------------------------------------------------------------

    def pod_list(self) -> dict[str, Any]:
        """A v1 PodList as the exporter's Kubernetes discovery reads it (annotated pods on NODE)."""
        with self.lock:
            pods = [(p, p.server.serving) for p in self.pods.values()]
        items = []
        for p, ready in pods:
            started = datetime.fromtimestamp(p.created_unix, UTC).isoformat().replace("+00:00", "Z")
            items.append({
                "metadata": {"name": p.name, "namespace": NAMESPACE, "annotations": {
                    "keda-llm.io/scrape": "true", "keda-llm.io/port": str(p.server.port),
                    "keda-llm.io/max-running": str(self.sc.max_num_seqs)}},
                "spec": {"nodeName": NODE, "containers": [{"name": "vllm", "ports": [
                    {"containerPort": p.server.port}]}]},
                "status": {"phase": "Running", "podIP": "127.0.0.1", "containerStatuses": [
                    {"name": "vllm", "ready": ready and not p.draining,
                     "state": {"running": {"startedAt": started}}}]},
            })
        return {"kind": "PodList", "apiVersion": "v1", "items": items}

    def counts(self) -> dict[str, int]:
        with self.lock:
            sim = self.sim
            out = {"ready": 0, "starting": 0, "draining": 0}
            if sim is None:
                return out
            for r in sim.cluster.replicas:
                out["ready" if r.phase is PodPhase.READY else "draining" if r.phase is PodPhase.DRAINING
                    else "starting"] += 1
            out.update(engines=sim.in_flight, spec=sim.desired)
            return out

    def in_flight(self) -> int:
        """Requests the simulated engines hold (queued or running)."""
        with self.lock:
            return 0 if self.sim is None else self.sim.in_flight

    def pod_of_gpu(self) -> dict[int, str]:
        with self.lock:
            return {p.gpu: p.name for p in self.pods.values()}

    # -- the Deployment's /scale, as the scaler's Kubernetes reader would give it ------------------

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def track(self, namespace: str, name: str) -> None:
        return None

    def untrack(self, namespace: str, name: str) -> None:
        return None

    def state(self, namespace: str, name: str) -> WorkloadState | None:
        return self.workload if (namespace, name) == (NAMESPACE, NAME) else None


# ---------------------------------------------------------------------------- the real components


def _hold_port(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A socket bound to `port` (0: a free one) that does not listen: connections to it are refused, and
    no other socket is given the port meanwhile (SO_REUSEADDR, as the pods' servers bind it, so a pod's
    server can take it at once after)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def activator_config(sc: Scenario, scaler_http: str, endpoints: list[str],
                     admin_token_file: str = "") -> ActivatorConfig:
    """`keda-llm activator`'s configuration for the demo, through its own parser (as its YAML file is): one
    model, the pods' slots as static endpoints probed on /health, woken through the scaler's POST
    /v1/activate/demo/llama-8b; its bound (`max_held`) is under the burst at zero."""
    return parse_activator_config({
        "listen": "127.0.0.1:0",
        "scaler": scaler_http,
        "activation_interval": f"{sc.activation_interval:g}s",
        "admin_token_file": admin_token_file,
        "probe_interval": f"{sc.probe_interval:g}s",
        "probe_timeout": "1s",
        "shutdown_grace": "5s",
        "default_model": MODEL,
        "models": [{"name": MODEL, "namespace": NAMESPACE, "scaled_object": NAME, "endpoints": endpoints,
                    "max_held": sc.max_held, "max_wait": f"{sc.max_wait:g}s", "cold_start": f"{sc.cold_start:g}s"}],
    })


class _PodGpus:
    """GPU source for the exporter: the real NVML collector over a fake NVML, with each GPU attributed to
    the pod that holds it (the kubelet's pod-resources API does this on a real node)."""

    def __init__(self, nvml: Any, world: World) -> None:
        from keda_llm.exporter.nvml import NvmlCollector

        self._collector = NvmlCollector(nvml=nvml)
        self._world = world

    def collect(self) -> list[Any]:
        gpus = self._collector.collect()
        owners = self._world.pod_of_gpu()
        for i, g in enumerate(gpus):
            if i in owners:
                g.attribution = {"namespace": NAMESPACE, "pod": owners[i], "container": "vllm"}
        return gpus

    def close(self) -> None:
        self._collector.close()


class _Exporter:
    """The real exporter: Collector + HTTP server, discovering pods from the world's pod list."""

    def __init__(self, sc: Scenario, world: World, warm_dir: str, token_file: str) -> None:
        from keda_llm.exporter.cli import build_collector
        from keda_llm.exporter.config import parse_config
        from keda_llm.exporter.fake_nvml import FakeNvml
        from keda_llm.exporter.server import create_server
        from keda_llm.exporter.warm import Warmer

        cfg = parse_config({
            "listen": "127.0.0.1:0", "interval": sc.exporter_interval, "node_name": NODE,
            "kubernetes": {"enabled": True, "refresh_interval": 1.0},
            "gpu": {"nvml": True, "pod_resources_socket": ""},
            "warm": {"directories": [warm_dir], "token_file": token_file},
        }, env={})
        self.collector = build_collector(cfg, gpu_source=_PodGpus(FakeNvml(world.gpus), world),
                                         list_pods=lambda node: world.pod_list())
        self.warmer = Warmer(cfg.warm)
        self.server, port = create_server(cfg.listen_address, self.collector, self.warmer)
        self.url = f"http://127.0.0.1:{port}/metrics"

    def start(self) -> None:
        self.collector.start()
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        self.collector.stop()


def scaler_settings(sc: Scenario, warm_token_file: str | None = None) -> ScalerSettings:
    """`keda-llm scaler`'s assembly on loopback with the demo's shortened intervals; decisions on the RPC path.
    `warm_token_file`: the exporters' /v1/warm token (`--warm-token-file`), so the scaler warms weights."""
    return ScalerSettings(grpc_address="127.0.0.1:0", http_address=("127.0.0.1", 0), interval_s=sc.scaler_interval,
                          scrape_timeout_s=min(2.0, sc.scaler_interval), tick_s=sc.scaler_tick,
                          activation_hold_s=sc.activation_hold, refresh_s=None, demand_watch_s=1.0,
                          warm_token_file=warm_token_file, warm_scan_s=max(1.0, sc.scaler_interval))


SCALEDOBJECT = """\
# The ScaledObject `keda-llm demo` runs. Its windows and intervals are shortened so that a few
# minutes show scale up, down, to zero and back; in a cluster start from deploy/examples instead.
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {name}
  namespace: {namespace}
spec:
  scaleTargetRef:
    name: {name}
  pollingInterval: {polling}
  cooldownPeriod: {cooldown}
  minReplicaCount: 0
  maxReplicaCount: {max_replicas}
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleUp:
          stabilizationWindowSeconds: 0
          tolerance: "0"
          policies: [{{type: Pods, value: {max_replicas}, periodSeconds: 15}}]
        scaleDown:
          stabilizationWindowSeconds: {down_window}
          tolerance: "0"
          policies: [{{type: Percent, value: 100, periodSeconds: 15}}]
  triggers:
    - type: external-push
      metadata:
        scalerAddress: "{scaler}"
        exporters: "{exporter}"
        model: {model}
        policy: tokens
        targetKVUtilization: "{target}"
        stableWindow: "{stable}s"
        panicWindow: "{panic}s"
        scaleToZero: "true"
        idleTimeout: "{idle}s"
        warmPath: "{warm_path}"
        coldStart: "{cold_start}s"
"""


def scaledobject_yaml(sc: Scenario, scaler: str, exporter: str, warm_path: str = EXAMPLE_WARM_PATH) -> str:
    return SCALEDOBJECT.format(name=NAME, namespace=NAMESPACE, polling=sc.polling_interval, cooldown=sc.cooldown,
                               max_replicas=sc.max_replicas, down_window=sc.scale_down_stabilization,
                               scaler=scaler, exporter=exporter, model=MODEL, target=sc.target_kv_utilization,
                               stable=f"{sc.stable_window:g}", panic=f"{sc.panic_window:g}",
                               idle=f"{round(sc.idle_timeout, 2):g}", warm_path=warm_path,
                               cold_start=f"{sc.cold_start:g}")


class _Weights:
    """The model's stand-in weight files in a temporary directory the exporter may warm, the bearer
    token the scaler presents to it and the activator's admin token (Secrets in a cluster)."""

    def __init__(self) -> None:
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="keda-llm-demo-")
        root = Path(self._dir.name)
        self.warm_dir = str(root / "models")
        self.path = str(root / "models" / "llama-8b")
        Path(self.path).mkdir(parents=True)
        with open(Path(self.path) / "model.safetensors", "wb") as f:
            for _ in range(WEIGHTS_BYTES // MIB):
                f.write(bytes(MIB))
        self.token_file = str(root / "warm-token")
        Path(self.token_file).write_text(secrets.token_hex(16) + "\n")
        self.admin_token_file = str(root / "activator-admin-token")  # the activator's GET /admin/queues
        self.admin_token = secrets.token_hex(16)
        Path(self.admin_token_file).write_text(self.admin_token + "\n")

    def close(self) -> None:
        self._dir.cleanup()


# ---------------------------------------------------------------------------------- observation


@dataclass
class View:
    """One refresh of the display: read from the real endpoints, plus the cluster's own counts."""

    t: float
    phase: str
    load: float
    running: float | None = None
    waiting: float | None = None
    kv: float | None = None
    engines_up: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    desired: float | None = None
    active: bool | None = None
    reason: str = ""
    panic: bool = False
    gpus_used: int = 0
    gpu_util: float | None = None
    power_w: float | None = None
    # the activator's own numbers, read from its admin port (/metrics and /admin/queues)
    held: float | None = None  # keda_llm_activator_held_requests
    refused: float = 0.0  # keda_llm_activator_rejects_total, all reasons
    forwarded: float = 0.0  # keda_llm_activator_forwarded_total, all endpoints
    ready_endpoints: float | None = None  # keda_llm_activator_ready_endpoints
    oldest_held: float | None = None  # /admin/queues: seconds the oldest held request has waited
    sent: int = 0  # the load's client: requests sent, and not answered yet
    in_flight: int = 0


def _read(url: str, token: str = "") -> str:
    """One exposition's (or document's) text ('' when it cannot be read); `token`: a bearer token."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=2) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def _families(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> (labels, value) of one exposition, read with the exporter's own parser."""
    from keda_llm.exporter.parse import parse

    text = _read(url)
    if not text:
        return {}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for s in parse(text):
        out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _model_values(fams: dict[str, list[tuple[dict[str, str], float]]], name: str) -> list[float]:
    return [v for labels, v in fams.get(name, []) if labels.get("model") == MODEL and math.isfinite(v)]


def observe(t: float, sc: Scenario, world: World, exporter_url: str, scaler_http: str, load: Load | None = None,
            activator_admin: str = "", admin_token: str = "") -> View:
    phase = sc.phase_at(t).name if t < sc.duration else "finishing the requests in flight"
    view = View(t, phase, 0.0 if load is None else load.rate(t), counts=world.counts())
    if load is not None:
        view.sent, view.in_flight = load.stats.sent, load.stats.in_flight
    ex = _families(exporter_url)
    up = _model_values(ex, "llm_engine_up")
    view.engines_up = int(sum(up))
    running, waiting = _model_values(ex, "llm_requests_running"), _model_values(ex, "llm_requests_waiting")
    kv = _model_values(ex, "llm_kv_cache_usage_ratio")
    if running:
        view.running, view.waiting = sum(running), sum(waiting)
    if kv:
        view.kv = sum(kv) / len(kv)
    used = [v for labels, v in ex.get("llm_gpu_utilization_ratio", []) if labels.get("pod")]
    power = [v for _, v in ex.get("llm_gpu_power_watts", [])]
    view.gpus_used = len(used)
    view.gpu_util = sum(used) / len(used) if used else None
    view.power_w = sum(power) if power else None
    sf = _families(scaler_http + "/metrics")
    desired = _model_values(sf, "keda_llm_scaler_desired_replicas")
    active = _model_values(sf, "keda_llm_scaler_active")
    reasons = [labels.get("reason", "") for labels, v in sf.get("keda_llm_scaler_decision_reason", [])
               if v == 1 and labels.get("model") == MODEL]
    panic = _model_values(sf, "keda_llm_scaler_panic")
    view.desired = desired[0] if desired else None
    view.active = bool(active[0]) if active else None
    view.reason = reasons[0] if reasons else ""
    view.panic = bool(panic and panic[0])
    if activator_admin:
        af = _families(activator_admin + "/metrics")
        held = _model_values(af, "keda_llm_activator_held_requests")
        view.held = held[0] if held else None
        view.refused = sum(_model_values(af, "keda_llm_activator_rejects_total"))
        view.forwarded = sum(_model_values(af, "keda_llm_activator_forwarded_total"))
        ready = _model_values(af, "keda_llm_activator_ready_endpoints")
        view.ready_endpoints = ready[0] if ready else None
        if view.held:
            queues = _read(activator_admin + "/admin/queues", admin_token)
            oldest = json.loads(queues).get(MODEL, {}).get("oldest_held_seconds") if queues else None
            view.oldest_held = float(oldest) if isinstance(oldest, int | float) else None
    return view


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def plain_line(v: View) -> str:
    c = v.counts
    pods = f"pods {c.get('ready', 0)} ready"
    if c.get("starting"):
        pods += f", {c['starting']} starting"
    if c.get("draining"):
        pods += f", {c['draining']} draining"
    gw = f" | activator holds {v.held:.0f}" + (f" (oldest {v.oldest_held:.1f} s)" if v.oldest_held is not None
                                                else "") if v.held else ""
    panic = ", panic" if v.panic and v.reason != "panic" else ""
    scaler = "-" if v.desired is None else f"{v.desired:.0f} ({v.reason}{panic})"
    active = "" if v.active is None else (" active" if v.active else " INACTIVE")
    return (f"[{v.t:5.0f}s] {v.phase:<13} load {v.load:5.1f} req/s, {v.in_flight:3d} in flight | running "
            f"{_num(v.running):>3} waiting {_num(v.waiting):>3} kv {_num(None if v.kv is None else 100 * v.kv):>3}% | "
            f"{pods} | deployment {c.get('spec', 0)} | scaler wants {scaler}{active}{gw}")


# ------------------------------------------------------------------------------------- the run


@dataclass
class Report:
    """What a run did: the summary printed at the end, and what the tests check."""

    exit_code: int = 0
    stats: Stats = field(default_factory=Stats)
    load: LoadStats = field(default_factory=LoadStats)  # the requests, as the load's HTTP client saw them
    unfinished: int = 0  # requests with no final answer when the run ended
    interrupted: bool = False  # Ctrl-C: the unfinished requests were cut off by the user, not lost

    @property
    def lost(self) -> int:
        """Requests sent and never served (a complete 200 answer), less those a Ctrl-C cut off in flight."""
        return self.load.sent - self.load.served - (self.unfinished if self.interrupted else 0)

    events: list[tuple[float, str]] = field(default_factory=list)
    control: list[tuple[float, str, int, int]] = field(default_factory=list)  # KEDA/HPA events
    max_pods: int = 0
    exporter_running_series: bool = False
    scaler_errors: int = 0
    log_errors: list[str] = field(default_factory=list)
    activator_held_max: float = 0.0  # the most the activator's held gauge showed over HTTP
    activator_metrics: str = ""  # the activator's /metrics at the end of the run (its admin port)


def _activator_numbers(registry: Any) -> dict[str, float]:
    """The demo model's series of the activator's registry (activator/proxy.py's Metrics) by short name."""
    out: dict[str, float] = {}
    for fam in registry.collect():
        for smp in fam.samples:
            if smp.labels.get("model") != MODEL:
                continue
            key = {"keda_llm_activator_held_requests": "held",
                   "keda_llm_activator_ready_endpoints": "ready",
                   "keda_llm_activator_activations_total": f"activations_{smp.labels.get('result')}",
                   "keda_llm_activator_rejects_total": f"rejects_{smp.labels.get('reason')}",
                   "keda_llm_activator_forwarded_total": "forwarded",
                   "keda_llm_activator_wait_seconds_count": f"held_{smp.labels.get('outcome')}",
                   "keda_llm_activator_wait_seconds_sum": f"held_{smp.labels.get('outcome')}_sum",
                   }.get(smp.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + smp.value
    return out


class _LogCollector(logging.Handler):
    """Keeps the components' warnings out of the display; errors are shown in the summary."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[str] = []
        self.warnings = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(f"{record.name}: {record.getMessage()}")
        else:
            self.warnings += 1


CONTROL_WORDS = {
    "keda_activate": "KEDA: trigger active, scale from zero",
    "push_activate": "KEDA: StreamIsActive push, scale from zero at once",
    "keda_deactivate": "KEDA: inactive past cooldownPeriod, scale to zero",
    "keda_set_min": "KEDA: raised to minReplicaCount",
    "hpa_scale_up": "HPA: scale up",
    "hpa_scale_down": "HPA: scale down",
    "hpa_created": "KEDA: HPA created for metric",
    "hpa_not_created": "KEDA: no HPA yet",
    "hpa_metric_error": "HPA: metric error, holding",
    "scaler_error": "KEDA: scaler answered an error",
    "fallback_active": "KEDA: fallback active",
    "fallback_cleared": "KEDA: fallback cleared",
    "push_ignored": "KEDA: StreamIsActive false ignored",
    "push_skipped": "KEDA: push before the HPA exists, skipped",
}


@contextmanager
def _ctrl_c_sets(flag: threading.Event, received: list[int] | None = None) -> Iterator[None]:
    """Ctrl-C sets `flag` for the run loop to read, instead of raising KeyboardInterrupt wherever the main
    thread happens to be: raised inside a weakref callback it printed "Exception ignored ..." and a
    traceback under the summary. A second Ctrl-C raises as before, for a user who will not wait. Left
    alone off the main thread and where SIGINT is not Python's default (ignored, or the caller's own).
    SIGTERM (`kill`, `timeout`, a closed terminal's supervisor) does the same where it is at its default, which
    ended the demo on the spot: no summary, and its temporary folder of weights left behind. The signals
    caught are appended to `received`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        if flag.is_set():
            raise KeyboardInterrupt
        if received is not None:
            received.append(signum)
        flag.set()

    previous: dict[int, Any] = {}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, on_signal)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Demo:
    """Wires the parts together, runs the script on the wall clock, shows it, and reports."""

    def __init__(self, sc: Scenario, out: TextIO, plain: bool) -> None:
        self.sc = sc
        self.out = out
        self.plain = plain
        self.report = Report()
        self._events_lock = threading.Lock()
        self._pending: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._interrupt = threading.Event()  # Ctrl-C, set by the signal handler and read by the run loop
        self._signals: list[int] = []  # what set it: SIGINT (Ctrl-C) or SIGTERM
        self._t0 = time.monotonic()
        self._threads: list[threading.Thread] = []
        self.world: World | None = None
        self._last_desired: float | None = None
        self._warm_seen: set[tuple[int, str]] = set()
        self.activator: RunningActivator | None = None
        self.load: Load | None = None
        self.admin_token = ""
        self._seen: dict[str, float] = {}  # the activator's counters as last turned into events
        self._refused = 0.0  # 429s not told yet (told at most once a second)
        self._refused_at = -math.inf

    def now(self) -> float:
        return time.monotonic() - self._t0

    def event(self, msg: str) -> None:
        item = (self.now(), msg)
        with self._events_lock:
            self.report.events.append(item)
            self._pending.append(item)

    def take_events(self) -> list[tuple[float, str]]:
        with self._events_lock:
            out, self._pending = self._pending, []
        return out

    # -- threads ---------------------------------------------------------------------------------

    def _spawn(self, fn: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _simulate(self, world: World, exporter: _Exporter) -> None:
        """The world on the wall clock: the simulation advanced to now every 50 ms."""
        while not self._stop.wait(0.05):
            self._watch_activator()  # first: its hold and wake come before the push they cause
            self._record(world.advance(self.now()))
            self._watch_warms(exporter)
            if world.pods_changed.is_set():  # a pod came or went: the exporter re-lists at once
                world.pods_changed.clear()
                exporter.collector.refresh_discovery()
            c = world.counts()
            self.report.max_pods = max(self.report.max_pods, c["ready"] + c["starting"])

    def _watch_activator(self) -> None:
        """The activator's own counters and gauges (its Metrics, read in process) as events: holding,
        waking the model, refusing past its bound, forwarding what it held."""
        if self.activator is None:
            return
        now = _activator_numbers(self.activator.activator.metrics.registry)
        seen, self._seen = self._seen, now
        if not seen:
            return

        def grew(key: str) -> float:
            return now.get(key, 0.0) - seen.get(key, 0.0)

        route = f"/v1/activate/{NAMESPACE}/{NAME}"
        if now.get("held", 0) and not seen.get("held", 0):
            self.event(f"activator: no ready endpoint for the model: holding requests, POST {route} to the scaler")
        for result, words in (("ok", "200"), ("error", "failed")):
            for _ in range(int(grew(f"activations_{result}"))):
                self.event(f"activator: POST {route} -> {words}")
        self._refused += grew("rejects_queue_full")
        t = self.now()
        if self._refused and (t - self._refused_at >= 1.0 or grew("held_forwarded")):
            retry = self.load.stats.retry_after_max if self.load is not None else 0
            self.event(f"activator: {self._refused:.0f} answered 429 (queue full at its bound {self.sc.max_held}), "
                       f"Retry-After up to {retry} s")
            self._refused, self._refused_at = 0.0, t
        if n := grew("rejects_max_wait"):
            self.event(f"activator: {n:.0f} answered 503 (held past max_wait)")
        # in the activator's order: its probe finds the endpoint, then it forwards what it held
        if now.get("ready", 0) and not seen.get("ready", 0):
            self.event("activator: its /health probe finds a ready endpoint")
        if n := grew("held_forwarded"):
            waited = grew("held_forwarded_sum") / n
            self.event(f"activator: {n:.0f} held requests forwarded to a ready endpoint (mean hold {waited:.1f} s)")

    def _watch_warms(self, exporter: _Exporter) -> None:
        """The exporter's /v1/warm jobs (the scaler's calls) as events: accepted, then done."""
        for job in exporter.warmer.jobs():
            key = (job["id"], job["state"])
            if key in self._warm_seen:
                continue
            self._warm_seen.add(key)
            if job["state"] == "running" or (job["id"], "running") not in self._warm_seen:
                self._warm_seen.add((job["id"], "running"))
                self.event(f"scaler -> exporter: POST /v1/warm {{path: .../{Path(job['path']).name}}} accepted "
                           f"({job['bytes'] / MIB:.0f} MiB of weights)")
            if job["state"] == "done":
                self.event(f"exporter: weights warmed into the page cache ({job['bytes_read'] / MIB:.0f} MiB in "
                           f"{job['seconds']:.2f} s): the next pod's weights phase is cut")
            elif job["state"] == "failed":
                self.event(f"exporter: warm failed: {job['error']}")

    def _record(self, events: list[Any]) -> None:
        lead = self.world.lead if self.world is not None else 0.0
        for e in events:
            self.report.control.append((e.at - lead, e.kind, e.replicas_before, e.replicas_after))
            if e.kind == "scaler_error":
                self.report.scaler_errors += 1
            words = CONTROL_WORDS.get(e.kind, e.kind)
            moved = e.replicas_before != e.replicas_after
            change = f" {e.replicas_before} -> {e.replicas_after}" if moved else ""
            detail = f" ({e.detail})" if e.kind in ("hpa_created", "scaler_error") and e.detail else ""
            self.event(f"{words}{change}{detail}")

    def _wait_for_data(self, scaler: ScalerThread, cfg: Any, timeout: float = 30.0) -> None:
        """Until the scaler has collected the model's replicas (one fresh, up replica): KEDA would poll
        before this too and get UNAVAILABLE; starting the clock after keeps the log clean."""
        sources = scaler.scaler.sources
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.wait(0.1) and not self._interrupt.is_set():
            with sources.history_lock:
                h = sources.history(NAMESPACE, cfg)
                snap = h.snapshot(time.time()) if h is not None else None
            if snap is not None and snap.fresh > 0:
                return

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Report:
        """Run the script to its end or to Ctrl-C, tear everything down, and report."""
        with _ctrl_c_sets(self._interrupt, self._signals):
            return self._run()

    def _run(self) -> Report:
        import grpc

        from keda_llm.exporter.fake_nvml import fake_gpus
        from keda_llm.scaler.config import parse_metadata

        collector = _LogCollector()
        root = logging.getLogger()
        saved = (root.handlers[:], root.level)
        root.handlers, root.level = [collector], logging.WARNING
        gpus = fake_gpus(self.sc.max_replicas, memory_used=GIB // 2, utilization_gpu=0, power_mw=70_000,
                         temperature_c=35)
        world = self.world = World(self.sc, self.event, gpus)
        weights = _Weights()
        self.admin_token = weights.admin_token
        exporter: _Exporter | None = None
        scaler: ScalerThread | None = None
        channel: Any = None
        ext: GrpcExternalScaler | None = None
        http: LoopThread | None = None
        interrupted = False
        try:
            exporter = _Exporter(self.sc, world, weights.warm_dir, weights.token_file)
            warmer = exporter.warmer
            world.weights_warm = lambda: any(j["state"] == "done" and j["path"] == weights.path
                                             for j in warmer.jobs())
            scaler = start_in_thread(scaler_settings(self.sc, weights.token_file), reader=world)
            http = LoopThread()
            self.activator = start_activator(http, activator_config(self.sc, scaler.http_url, world.endpoints(),
                                                                    weights.admin_token_file))
            self.load = Load(f"{self.activator.proxy_url}/v1/completions", MODEL, schedule(self.sc), self.now)
            settings = parse_scaledobjects(scaledobject_yaml(self.sc, scaler.grpc_target, exporter.url.split("/")[2],
                                                             weights.path), "demo ScaledObject")[0]
            cfg = parse_metadata(settings.triggers[0].metadata)
            # what KEDA's first call would do: the scaler starts collecting the model from the exporter
            scaler.scaler.sources.for_config(cfg).watch(NAMESPACE, cfg.model)
            channel = grpc.insecure_channel(scaler.grpc_target)
            ext = GrpcExternalScaler(channel)
            keda = KedaController(NAME, settings, ext, initial_replicas=self.sc.initial_replicas,
                                  hpa=settings.hpa_config(sync_period_s=self.sc.hpa_sync, configurable_tolerance=True))
            self._header(exporter.url, scaler)
            self._t0 = time.monotonic()
            world.begin(keda, settings, ext)
            assert keda.loop is not None
            ext.open_stream(keda.loop.keda.refs[0])  # KEDA's push loop opens the stream of an external-push trigger
            exporter.start()
            self._wait_for_data(scaler, cfg)
            self._t0 = time.monotonic()  # the simulation's time 0, and the load's
            if not self._interrupt.is_set():
                self._spawn(lambda: self._simulate(world, exporter), "demo-world")
                http.spawn(self.load.run())
                try:
                    self._show(world, exporter.url, scaler.http_url)
                except KeyboardInterrupt:  # a second Ctrl-C, from a user who will not wait
                    interrupted = True
            interrupted = interrupted or self._interrupt.is_set()
        finally:
            # the load first (Ctrl-C, or the grace passed): a request still in flight is cut off by the user;
            # stopping the world under it first failed its connection, and the summary counted it lost
            if http is not None and self.load is not None and not self.load.done:
                http.call(self.load.cancel())
            self._stop.set()
            for t in self._threads:
                t.join(10)
            if http is not None:
                if self.activator is not None:
                    self.report.activator_metrics = _read(self.activator.admin_url + "/metrics")
                    stop_activator(http, self.activator)
                http.close()
            world.finish()
            if ext is not None:
                ext.close()
            if channel is not None:
                channel.close()
            world.close()
            if exporter is not None:
                exporter.stop()
                world.stats.warm_jobs = exporter.warmer.jobs()
                exporter.warmer.wait(5.0)
            if scaler is not None:
                scaler.stop()
            weights.close()
            root.handlers, root.level = saved
        r = self.report
        r.stats = world.stats
        if self.load is not None:
            r.load = self.load.stats
        r.unfinished = r.load.in_flight
        r.log_errors = collector.errors
        r.interrupted = interrupted
        self._summary(collector.warnings)
        r.exit_code = 1 if r.lost else (128 + self._stopped_by() if interrupted else 0)
        return r

    def _stopped_by(self) -> int:
        """The signal that stopped the run early: SIGTERM where that came first, else SIGINT (Ctrl-C)."""
        return int(self._signals[0]) if self._signals else int(signal.SIGINT)

    def _show(self, world: World, exporter_url: str, scaler_http: str) -> None:
        """Refresh the view until the script ends and every request was answered (or a grace passes)."""
        grace = max(15.0, 0.15 * self.sc.duration)
        load = self.load
        admin = self.activator.admin_url if self.activator is not None else ""
        live: Any = None
        if not self.plain:
            from rich.console import Console
            from rich.live import Live

            live = Live(console=Console(file=self.out), refresh_per_second=2, transient=False)
            live.start()
        period = 1.0 if self.plain else 0.5
        next_at = 0.0
        try:
            while not self._interrupt.is_set():
                t = self.now()
                if t >= self.sc.duration and (load is None or load.done or t >= self.sc.duration + grace):
                    break
                if t >= next_at:
                    next_at += period
                    view = observe(t, self.sc, world, exporter_url, scaler_http, load, admin, self.admin_token)
                    if view.running is not None:
                        self.report.exporter_running_series = True
                    self.report.activator_held_max = max(self.report.activator_held_max, view.held or 0.0)
                    if view.desired is not None and view.desired != self._last_desired:
                        self._last_desired = view.desired
                        self.event(f"scaler: desired {view.desired:.0f} ({view.reason})")
                    if live is not None:
                        live.update(self._panel(view))
                    else:
                        for at, msg in self.take_events():
                            print(f"  {at:6.1f}s  {msg}", file=self.out)
                        print(plain_line(view), file=self.out, flush=True)
                time.sleep(max(0.0, min(next_at - self.now(), 0.1)))
        finally:
            if live is not None:
                live.stop()

    def _panel(self, v: View) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        c = v.counts
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold cyan", justify="right")
        grid.add_column()
        bar = int(30 * min(1.0, v.t / self.sc.duration))
        grid.add_row("time", f"{v.t:5.0f} s of {self.sc.duration:.0f} s  [{'#' * bar}{'.' * (30 - bar)}]  "
                             f"phase: [bold]{v.phase}[/bold]")
        grid.add_row("load", f"{v.load:.1f} req/s over HTTP to the activator  (sent {v.sent}, awaiting an answer "
                             f"{v.in_flight})")
        grid.add_row("engines", f"running {_num(v.running)}  waiting {_num(v.waiting)}  KV cache "
                                f"{_num(None if v.kv is None else 100 * v.kv)}%  (from the exporter, "
                                f"{v.engines_up} up)")
        grid.add_row("GPUs", f"{v.gpus_used} of {self.sc.max_replicas} held by pods, "
                             f"{_num(None if v.gpu_util is None else 100 * v.gpu_util)}% busy, "
                             f"{_num(v.power_w)} W in all  (fake NVML, read by the exporter)")
        grid.add_row("pods", f"[green]{c.get('ready', 0)} ready[/green]  [yellow]{c.get('starting', 0)} starting"
                             f"[/yellow]  [magenta]{c.get('draining', 0)} draining[/magenta]  "
                             f"(Deployment spec: {c.get('spec', 0)})")
        scaler = "-" if v.desired is None else f"{v.desired:.0f} replicas, reason [bold]{v.reason}[/bold]"
        if v.panic:
            scaler += "  [red]panic[/red]"
        if v.active is not None:
            scaler += "  active" if v.active else "  [red]inactive[/red]"
        grid.add_row("scaler", scaler)
        gw = v.held or 0
        oldest = f", oldest {v.oldest_held:.1f} s" if v.oldest_held is not None else ""
        grid.add_row("activator", (f"[bold yellow]{gw:.0f} requests held (bound {self.sc.max_held}{oldest}), "
                                   "waiting for a ready endpoint[/bold yellow]" if gw else
                                   f"passing requests through to {_num(v.ready_endpoints)} ready endpoints")
                     + f"  (its /metrics: forwarded {v.forwarded:.0f}, refused with Retry-After {v.refused:.0f})")
        with self._events_lock:
            recent = self.report.events[-12:]
        events = "\n".join(f"{at:6.1f}s  {msg}" for at, msg in recent) or "(none yet)"
        return Group(Panel(grid, title=f"keda-llm demo: {MODEL} in namespace {NAMESPACE}"),
                     Panel(events, title="events"))

    def _header(self, exporter_url: str, scaler: ScalerThread) -> None:
        sc = self.sc
        act = self.activator
        assert act is not None
        starts = " -> ".join(f"{p.start:.0f}s {p.name}" for p in sc.phases)
        lines = [
            f"keda-llm demo: {MODEL} (namespace {NAMESPACE}), {sc.duration:.0f} s of real time, all on loopback.",
            "  real      the keda-llm exporter, scaler and activator, their HTTP and gRPC endpoints:",
            f"              exporter  {exporter_url}   POST /v1/warm (weights into the page cache)",
            f"              scaler    gRPC {scaler.grpc_target} (KEDA ExternalScaler)   {scaler.http_url}/metrics",
            f"                        POST {scaler.http_url}/v1/activate/{NAMESPACE}/{NAME}   (warmPath set: wakes "
            "and scale-ups warm the weights)",
            f"              activator {act.proxy_url}/v1/completions (the load's requests; bound {sc.max_held} held, "
            "then 429 + Retry-After)",
            f"                        {act.admin_url}/metrics   (the pods: {len(self.world.ports) if self.world else 0}"
            " static endpoints, probed on /health)",
            "  simulated by the simulator the backtests run, on the wall clock: the Deployment's pods, their engines",
            f"            ({sc.max_num_seqs} sequences, {sc.num_blocks * sc.block_size} KV tokens each, "
            f"{sc.cold_start:g} s cold start before the port opens; /v1/completions and vLLM /metrics),",
            "            and KEDA + the HPA (simulator/control), calling the scaler over real gRPC as KEDA does;"
            f" {sc.max_replicas} GPUs behind a fake NVML.",
            "  cold start " + " + ".join(f"{n} {v:.2f} s" for n, v in cold_phases(sc).items())
            + f"; weights from the page cache once warmed: "
            f"{cold_phases(sc)['weight_load'] * WARM_WEIGHTS_FACTOR:.2f} s",
            f"  shortened pollingInterval {sc.polling_interval}s, cooldownPeriod {sc.cooldown}s, HPA sync "
            f"{sc.hpa_sync:g}s (Kubernetes: 15s), stableWindow {sc.stable_window:g}s, panicWindow "
            f"{sc.panic_window:g}s, idleTimeout {round(sc.idle_timeout, 2):g}s",
            f"  script    {starts}; every other request streamed",
            "  stop      Ctrl-C ends early; the summary still prints",
            "  try       curl -s " + exporter_url + " | grep llm_requests      "
            "(the ScaledObject: keda-llm demo --print-scaledobject)",
            f"            curl -s {act.admin_url}/metrics | grep keda_llm_activator_held",
            f"            curl -s {act.proxy_url}/v1/completions -d '{{\"model\": \"{MODEL}\", \"prompt\": "
            "\"hello\", \"max_tokens\": 8}'   (one of your own, through the activator)",
            "",
        ]
        print("\n".join(lines), file=self.out, flush=True)

    def _summary(self, warnings: int) -> None:
        r, s, q = self.report, self.report.stats, self.report.load
        done = q.outcomes
        ttft = sorted(o.ttft for o in done if o.ttft is not None)
        whole = sorted(o.latency for o in done if not o.streamed and o.complete and o.latency is not None)

        def pct(xs: list[float], p: float) -> str:
            return f"{xs[min(len(xs) - 1, int(p * len(xs)))]:.1f} s" if xs else "-"

        act = _exposition(r.activator_metrics)
        kinds = [k for _, k, _, _ in r.control]
        done_warms = sum(1 for j in s.warm_jobs if j["state"] == "done")
        warmed = sum(1 for _, _, w in s.cold_starts if w)
        cold_w = cold_phases(self.sc)["weight_load"]
        warm_w = cold_w * WARM_WEIGHTS_FACTOR
        lost = r.lost
        cut = f", interrupted in flight {r.unfinished}" if r.interrupted else ""
        if lost:
            result = f"FAILED: {lost} requests not served"
            first = next((o for o in q.failed), None)
            if first is not None:
                result += f" (first: status {first.status} {first.error})"
        elif r.interrupted:
            by = "SIGTERM" if self._stopped_by() == signal.SIGTERM else "Ctrl-C"
            result = f"stopped early ({by}): {r.unfinished} requests were in flight, none lost"
        else:
            result = "OK: no request lost"
        held_n, held_sum = act.get("held_forwarded", 0.0), act.get("held_forwarded_sum", 0.0)
        rejected = {k.removeprefix("rejects_"): v for k, v in act.items() if k.startswith("rejects_") and v}
        retried = sum(1 for o in done if o.refusals)
        lines = [
            "",
            f"Summary ({self.now():.0f} s)",
            f"  requests  sent {q.sent} over HTTP through the activator, answered {q.answered}{cut}, served "
            f"{q.served} ({sum(1 for o in done if o.streamed and o.complete)} streamed; the simulated engines "
            f"finished {s.engine_finished}), lost {lost}; HTTP 200 "
            f"answers {q.ok_responses}; {retried} sent again after a Retry-After"
            + (" (" + ", ".join(f"{n} x {st}" for st, n in sorted(q.refusals.items())) + ")" if retried else ""),
            f"  latency   time to first token (streamed) p50 {pct(ttft, 0.5)}, p95 {pct(ttft, 0.95)}, max "
            f"{pct(ttft, 1.0)}; whole answers p50 {pct(whole, 0.5)}, p95 {pct(whole, 0.95)} (the client's clock: "
            "holds and retries included)",
            f"  activator forwarded {act.get('forwarded', 0):.0f}, held {held_n:.0f} while no endpoint was ready "
            f"(mean hold {held_sum / held_n if held_n else 0:.1f} s, bound {self.sc.max_held}), answered itself "
            + (", ".join(f"{v:.0f} {k}" for k, v in sorted(rejected.items())) or "0")
            + f"; POST /v1/activate {act.get('activations_ok', 0):.0f} ok, {act.get('activations_error', 0):.0f} "
            "failed (its /metrics)",
            f"  warming   {len(s.warm_jobs)} POST /v1/warm by the scaler ({done_warms} done, "
            f"{sum(j['bytes_read'] for j in s.warm_jobs) / MIB:.0f} MiB read by the exporter); cold starts "
            f"{len(s.cold_starts)} done, {warmed} with warm weights" + (
                f" (weights {warm_w:.2f} s instead of {cold_w:.2f} s)" if warmed else ""),
            f"  replicas  peak {r.max_pods}, pods started {s.pods_started}, time at zero {s.zero_seconds:.0f} s",
            f"  scaling   KEDA: {kinds.count('keda_activate') + kinds.count('push_activate')} wake(s) from zero "
            f"({kinds.count('push_activate')} by StreamIsActive push), {kinds.count('keda_deactivate')} scale(s) "
            f"to zero; HPA: {kinds.count('hpa_scale_up')} up, {kinds.count('hpa_scale_down')} down; "
            f"scaler errors seen by KEDA: {r.scaler_errors}",
            f"  logs      {len(r.log_errors)} errors, {warnings} warnings (scrapes of pods still loading are "
            "expected)" + (f"; first error: {r.log_errors[0]}" if r.log_errors else ""),
            f"  result    {result}",
        ]
        print("\n".join(lines), file=self.out, flush=True)


def _exposition(text: str) -> dict[str, float]:
    """The demo model's activator series of a /metrics text, by the short names of `_activator_numbers`."""
    from prometheus_client.parser import text_string_to_metric_families

    class _Registry:
        def collect(self) -> Any:
            return text_string_to_metric_families(text)

    return _activator_numbers(_Registry())


# ------------------------------------------------------------------------------------------ CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION, metavar="SECONDS",
                        help=f"length of the script in seconds, 20-3600 (default {DEFAULT_DURATION:g}); the "
                             "timings, the load and the engines' speed are compressed or stretched with it")
    parser.add_argument("--plain", action="store_true",
                        help="print one line per second instead of a live view (automatic when not a terminal)")
    parser.add_argument("--seed", type=int, default=Scenario.seed, help="random seed of the load (default 7)")
    parser.add_argument("--print-scaledobject", action="store_true",
                        help="print the ScaledObject the demo runs (for this --duration) and exit")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if not 20.0 <= args.duration <= 3600.0:
        print(f"keda-llm demo: error: --duration {args.duration:g}: must be between 20 and 3600 seconds; hint: the "
              f"default {DEFAULT_DURATION:g} shows the whole loop, a longer one shows it slower", file=sys.stderr)
        return 2
    if args.seed < 0:  # numpy's generator takes none: a traceback once the demo had started
        print(f"keda-llm demo: error: --seed {args.seed}: must be >= 0; hint: any whole number from 0 draws another "
              "load, e.g. --seed 8", file=sys.stderr)
        return 2
    sc = Scenario(seed=args.seed).scaled(args.duration)
    if args.print_scaledobject:
        out.write("# The addresses are examples: the demo binds free ports and prints them when it starts.\n")
        out.write(scaledobject_yaml(sc, "127.0.0.1:9090", "127.0.0.1:9400"))
        return 0
    plain = bool(args.plain) or not out.isatty()
    return Demo(sc, out, plain).run().exit_code
