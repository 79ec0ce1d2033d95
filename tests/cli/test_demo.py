"""`keda-llm demo`: one compressed run end to end, and the demo's own pieces.

The end-to-end run is the real thing (exporter, scaler, the activator proxy, gRPC, the KEDA+HPA
emulator, simulated replicas) in 45 s of wall time: every request goes over HTTP through the real
activator and must be answered once and served; the model scales up, goes to zero and comes back
through the activator's wake: the burst held (and past its bound answered 429 with Retry-After, then
sent again), the wake pushed over StreamIsActive, the weights warmed by the scaler's POST /v1/warm to
the exporter, and the woken pod's weights phase cut. The world is the simulator's (its Cluster,
engines and KEDA+HPA controller), advanced on the wall clock. The other tests are small and exact; the
activator's path at zero is also checked request by request on a world whose clock the test moves.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from httpstub import HttpStub, json_response

from keda_llm import demo
from keda_llm.demo_engine import EngineServer, Latency, render, text
from keda_llm.demo_traffic import LoopThread, start_activator, stop_activator
from keda_llm.exporter.discovery import pods_to_targets
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.model import Target
from keda_llm.simulator.cluster.engine import Simulation
from keda_llm.simulator.cluster.pods import Cluster
from keda_llm.simulator.control.controllers import PodPlan, ScheduleController
from keda_llm.simulator.hardware.perf import ConstantPerf
from keda_llm.simulator.hardware.replica import Replica, ReplicaConfig, Request


def test_replica_metrics_are_the_simulated_engine_in_vllm_format() -> None:
    # one simulated replica, batch limit 2, 4 KV blocks of 16 tokens; three requests of 10 prompt + 5 output
    engine = Replica(ReplicaConfig(max_num_seqs=2, max_num_batched_tokens=64, kv_blocks=4, block_size=16,
                                   enable_prefix_caching=False), ConstantPerf(base_s=0.1))
    reqs = [Request(rid, 0.0, 10, 5) for rid in (1, 2, 3)]
    for r in reqs:
        assert engine.add(r, 0.0)
    engine.step(0.0)  # admits two, prefills them: each has its first token
    latency = Latency()
    body = render("m", engine, latency)
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 2.0' in body
    assert 'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0' in body
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5' in body  # 2 of 4 blocks
    assert 'vllm:prompt_tokens_total{engine="0",model_name="m"} 20.0' in body
    # finished requests feed the histograms with vLLM's semantics: TTFT per request, ITL per gap
    done = Request(9, 0.0, 10, 5)
    done.first_token_s, done.finish_s = 0.3, 0.7  # 4 gaps of 0.1 s
    latency.add([done])
    body = render("m", engine, latency)
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="0.25"} 0.0' in body
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="0.5"} 1.0' in body
    assert 'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 4.0' in body
    # the real vLLM adapter reads it: KV capacity from cache_config_info, 4 blocks x 16 tokens
    (m,) = normalize(body, Target(url="http://x/metrics"))
    assert (m.engine, m.model, m.requests_running, m.kv_cache_capacity_tokens) == ("vllm", "m", 2.0, 64.0)
    assert m.time_to_first_token_seconds is not None and m.inter_token_latency_seconds is not None


def test_engine_server_refuses_until_loaded() -> None:
    server = EngineServer(lambda: 'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n', threading.Lock())
    try:
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(server.url, timeout=2)
        server.start()
        with urllib.request.urlopen(server.url, timeout=2) as resp:
            assert b'vllm:num_requests_running{engine="0",model_name="m"} 0.0' in resp.read()
    finally:
        server.stop()


def test_a_client_that_leaves_mid_answer_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C on the demo cut its own probes off mid-answer, and the engine's server printed a BrokenPipeError
    traceback over the summary. A client leaving is not the server's error; a failing body still is."""
    import contextlib
    import socket
    import struct

    big = "x" * (8 << 20)  # more than the socket buffers hold: the write fails once the client is gone
    calls = {"n": 0}

    def body() -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("a body that fails")
        return big

    server = EngineServer(body, threading.Lock())
    server.start()
    try:
        c = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        c.recv(1024)  # the answer has started
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # a reset, with most of the body unsent
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and calls["n"] < 2:
            with contextlib.suppress(urllib.error.URLError, ConnectionError):  # the next body fails: reported
                urllib.request.urlopen(server.url, timeout=2).read()
        time.sleep(0.3)
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert "RuntimeError: a body that fails" in err
    assert "BrokenPipeError" not in err and "ConnectionResetError" not in err, err


def test_scaled_scenario_keeps_the_story_and_the_floors() -> None:
    sc = demo.Scenario().scaled(45.0)  # f = 1/4
    assert [p.name for p in sc.phases] == [p.name for p in demo.Scenario().phases]
    spike = next(p for p in sc.phases if p.name == "spike")
    assert (spike.start, spike.end, spike.rate0) == (11.25, 15.0, 40.0)  # 45/4, 60/4, 10 x 4
    assert sc.decode_tokens_per_s == 160.0
    assert sc.stable_window == 6.0  # 20/4 = 5 is under Knative's 6 s floor
    assert sc.panic_window == 2.0  # 4/4 = 1 is under the 2 s floor
    assert sc.polling_interval == 1  # KEDA's whole seconds
    assert sc.rate(sc.burst_at - 0.1) == 0.0  # quiet right before the burst
    assert demo.Scenario().scaled(180.0) == demo.Scenario()


def test_arrivals_are_reproducible_from_the_seed() -> None:
    sc = demo.Scenario().scaled(40.0)
    a, b = demo.arrivals(sc), demo.arrivals(sc)
    assert a == b and a == sorted(a, key=lambda x: x.at)
    burst = [x for x in a if sc.burst_at <= x.at < sc.burst_at + sc.burst_s]
    assert len(burst) >= sc.burst_requests
    quiet = next(p for p in sc.phases if p.name == "quiet")
    assert not [x for x in a if quiet.start <= x.at < quiet.end]


def test_the_world_is_the_simulators_and_its_pods_are_what_the_exporter_discovers() -> None:
    sc = demo.Scenario()
    world = demo.World(sc, lambda msg: None, [])
    # two pods that exist at time 0, under a fixed schedule (no KEDA needed for this)
    world.begin(ScheduleController("two", [PodPlan(0.0, float("inf"), 0.0)] * 2))
    try:
        assert isinstance(world.sim, Simulation)
        assert type(world.sim.cluster) is Cluster  # the simulator's pods, lifecycle and scale-down rule
        targets = pods_to_targets(world.pod_list(), demo.NODE)
        assert [(t.namespace, t.pod, t.max_running) for t in targets] == [
            ("demo", "llama-8b-1", 16.0), ("demo", "llama-8b-2", 16.0)]
        assert [t.url for t in targets] == [p.server.url for p in world.pods.values()]
        # the pods took the first two slots: the activator's first two static endpoints
        assert [p.server.base_url for p in world.pods.values()] == world.endpoints()[:2]
        assert all(t.container_start is not None for t in targets)
        with urllib.request.urlopen(targets[0].url, timeout=2) as resp:  # ready: its port is open
            assert b"vllm:num_requests_running" in resp.read()
        with pytest.raises(urllib.error.URLError):  # a slot no pod has refuses connections
            urllib.request.urlopen(world.endpoints()[2] + "/health", timeout=2)
    finally:
        world.close()


def _post(url: str, doc: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def _run_world(world: demo.World, start: float, until: Callable[[], bool], limit: float = 60.0) -> float:
    """Move the world's clock 50 ms per 10 ms of wall time until `until()` (a bound, not a timing: fails at `limit`)."""
    t, deadline = start, time.monotonic() + limit
    while not until():
        assert time.monotonic() < deadline, "the world never got there"
        t += 0.05
        world.advance(t)
        time.sleep(0.01)
    return t


def test_a_pod_answers_completions_from_its_simulated_engine_whole_and_streamed() -> None:
    world = demo.World(demo.Scenario(), lambda msg: None, [])
    world.begin(ScheduleController("one", [PodPlan(0.0, float("inf"), 0.0)]))
    try:
        url = world.endpoints()[0]
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            assert resp.status == 200
        ask = {"model": demo.MODEL, "prompt": list(range(300)), "max_tokens": 7}
        whole, got_whole = _in_thread(lambda: _post(url + "/v1/completions", ask))
        streamed, got_streamed = _in_thread(lambda: _post(url + "/v1/completions", {**ask, "stream": True}))
        _run_world(world, 0.0, lambda: not whole.is_alive() and not streamed.is_alive())
        # the first 7 of the engine's words, one per token
        seven = " the model woke from zero and answered"
        assert text(0, 7) == seven
        status, _, body = got_whole[0]
        doc = json.loads(body)
        assert status == 200 and doc["choices"][0]["text"] == seven
        assert doc["usage"] == {"prompt_tokens": 300, "completion_tokens": 7, "total_tokens": 307}
        status, headers, body = got_streamed[0]
        assert status == 200 and headers["Content-Type"] == "text/event-stream"
        lines = [ln for ln in body.decode().split("\n\n") if ln]
        assert lines[-1] == "data: [DONE]"
        events = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
        assert "".join(e["choices"][0]["text"] for e in events) == seven
        assert [e["choices"][0]["finish_reason"] for e in events][-1] == "length"
        assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])
        assert world.stats.engine_finished == 2  # both went through the simulated engine
        # a body the engine cannot read is refused with vLLM's kind of answer
        status, _, body = _post(url + "/v1/completions", {**ask, "model": "other"})
        assert status == 400 and "the model `other` does not exist" in body.decode()
        status, _, body = _post(url + "/v1/completions", {**ask, "max_tokens": 0})
        assert status == 400 and "max_tokens" in body.decode()
        # 640 blocks of 16 tokens: a 10,240-token prompt and its 7 new tokens can never fit
        status, _, body = _post(url + "/v1/completions", {**ask, "prompt": list(range(10240))})
        assert status == 400 and json.loads(body)["error"]["message"] == (
            "prompt (10240 tokens) + max_tokens (7) is more than the engine's KV cache holds (10240 tokens)")
        assert world.stats.engine_finished == 2
    finally:
        world.close()


def _activator_series(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(admin_url + "/metrics", timeout=2) as resp:
        return demo._exposition(resp.read().decode())


def test_a_request_at_zero_is_held_by_the_real_activator_woken_and_answered_by_the_engine(tmp_path: Path) -> None:
    """No pod at first: the activator holds the request, POSTs the wake to the scaler's activation endpoint
    (a stub here: the full run uses the real scaler), refuses one past its bound with the Retry-After of
    the cold start, and forwards the held one once the pod is ready: 200 with the engine's answer."""
    sc = dataclasses.replace(demo.Scenario(), max_held=1)  # cold start 9 s
    world = demo.World(sc, lambda msg: None, [])
    world.begin(ScheduleController("wake", [PodPlan(2.0, float("inf"), 1.0)]))  # created at 1 s, ready at 2 s
    loop = LoopThread()
    try:
        with HttpStub(lambda req: json_response(200, {"activated": True})) as scaler:
            act = start_activator(loop, demo.activator_config(sc, scaler.url, world.endpoints()))
            try:
                url = act.proxy_url + "/v1/completions"
                ask = {"model": demo.MODEL, "prompt": list(range(100)), "max_tokens": 5}
                held, got = _in_thread(lambda: _post(url, ask))
                deadline = time.monotonic() + 30
                while _activator_series(act.admin_url).get("held", 0) != 1 or not scaler.requests:
                    assert time.monotonic() < deadline, "never held"
                    time.sleep(0.02)
                assert [(r.method, r.path) for r in scaler.requests][:1] == [("POST", "/v1/activate/demo/llama-8b")]
                assert held.is_alive()  # no pod yet: held, unanswered
                status, headers, body = _post(url, ask)  # past the bound of 1
                # Retry-After: what is left of the 9 s cold start since the wake, in whole seconds up: 9 while
                # under a second has passed (8 on a machine so loaded that a second passed)
                assert status == 429 and headers["Retry-After"] in ("9", "8"), headers
                assert json.loads(body)["error"]["type"] == "queue_full"
                _run_world(world, 0.0, lambda: not held.is_alive())
                status, _, body = got[0]
                assert status == 200
                assert json.loads(body)["choices"][0]["text"] == " the model woke from zero"  # 5 tokens
                m = _activator_series(act.admin_url)
                assert (m["held"], m["held_forwarded"], m["forwarded"]) == (0.0, 1.0, 1.0)
                assert m["rejects_queue_full"] == 1.0 and m["activations_ok"] >= 1.0
                assert world.stats.engine_finished == 1
            finally:
                stop_activator(loop, act)
    finally:
        loop.close()
        world.close()


def test_bad_duration_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert demo.run(parser.parse_args(["--duration", "5"])) == 2
    err = capsys.readouterr().err
    assert "--duration 5: must be between 20 and 3600 seconds" in err and "; hint: " in err and err.count("\n") == 1
    assert demo.run(parser.parse_args(["--seed", "-1"])) == 2  # was numpy's ValueError once the demo had started
    err = capsys.readouterr().err
    assert "--seed -1: must be >= 0" in err and "; hint: " in err and err.count("\n") == 1


def test_compressed_demo_scales_up_down_to_zero_and_back_losing_nothing() -> None:
    sc = demo.Scenario().scaled(45.0)  # 45 s leaves a margin between reaching zero and the burst
    out = io.StringIO()
    run = demo.Demo(sc, out, plain=True)
    report = run.run()
    text = out.getvalue()
    assert run.world is not None and type(run.world.sim.cluster) is Cluster  # the simulator's own world
    stats, load = report.stats, report.load
    assert report.exit_code == 0, text
    # every request went over HTTP through the activator and got one answer: a whole completion
    assert load.sent > 100 and load.answered == load.sent == len(load.outcomes), text
    assert load.served == load.sent and report.unfinished == 0 and not load.failed, text
    assert sum(1 for o in load.outcomes if o.streamed) == (load.sent + 1) // 2  # every other one streamed
    assert all(o.ttft is not None for o in load.outcomes if o.streamed)
    kinds = [kind for _, kind, _, _ in report.control]
    assert "hpa_created" in kinds
    assert "hpa_scale_up" in kinds, text
    assert "keda_deactivate" in kinds, text  # idle -> zero
    assert "push_activate" in kinds, text  # the activator's wake, pushed over StreamIsActive
    assert stats.zero_seconds > 0
    # the proxy was in the path: its forwarded counter is the 200 answers the client counted, one per request
    m = demo._exposition(report.activator_metrics)
    assert m["forwarded"] == load.ok_responses == load.served, (m, load.ok_responses)
    assert stats.engine_finished == load.served  # and each reached a simulated engine once: none twice, none lost
    # the burst came while at zero: the activator held up to its bound, answered the rest 429 with
    # Retry-After (the client sent those again after it), woke the model, and forwarded what it held
    assert m["held_forwarded"] >= sc.max_held, m
    assert m["rejects_queue_full"] == load.refusals[429] > 0, (m, load.refusals)
    assert m.get("rejects_max_wait", 0) == 0 and set(load.refusals) == {429}
    assert 1 <= load.retry_after_max <= 3  # what is left of the 2.25 s cold start, in whole seconds
    assert m["activations_ok"] >= 1 and m["held"] == 0.0, m
    assert report.activator_held_max > 0  # its held gauge, read over HTTP (once a second) during the run
    refused = [o for o in load.outcomes if o.refusals]
    assert refused and all(o.complete for o in refused)
    # the wake warmed the weights: the scaler's POST /v1/warm reached the real exporter right after the
    # activation, and the pod it woke loaded its weights from the page cache
    wake = text.index("activator: no ready endpoint for the model: holding requests")
    assert "activator: POST /v1/activate/demo/llama-8b -> 200" in text[wake:], text
    assert "scaler -> exporter: POST /v1/warm" in text[wake:], text
    assert "exporter: weights warmed into the page cache (16 MiB" in text[wake:], text
    assert any(j["state"] == "done" and j["bytes_read"] == 16 * 1024 * 1024 for j in stats.warm_jobs), stats.warm_jobs
    # cold start phases at 45 s (f = 1/4, 2.25 s): scheduling 0.25 + image 0.5 + weights 1.25 + init 0.25; warm
    # weights at page-cache speed instead of storage: 1.25 x 500e6 / 5.4e9 = 0.1157 s
    assert stats.cold_starts, text
    for _, phases, warm in stats.cold_starts:
        assert (phases["scheduling"], phases["image_pull"], phases["warmup"]) == pytest.approx((0.25, 0.5, 0.25))
        assert phases["weight_load"] == pytest.approx(1.25 * 500e6 / 5.4e9 if warm else 1.25)
    woken = [c for c in stats.cold_starts if c[0] in text[wake:]]
    assert woken and woken[0][2], stats.cold_starts  # the first pod after the wake: warm weights
    assert "weights 0.12 (warm)" in text[wake:], text
    assert report.scaler_errors == 0 and report.log_errors == [], text
    assert report.exporter_running_series  # llm_requests_running{model=...} was read from the exporter
    assert "http://127.0.0.1:" in text and "/v1/activate/demo/llama-8b" in text
    assert "result    OK: no request lost" in text
    assert (f"  requests  sent {load.sent} over HTTP through the activator, answered {load.sent}, served {load.sent} "
            in text), text
    assert f"  activator forwarded {load.sent:.0f}, held {m['held_forwarded']:.0f} while no endpoint was ready" in text
    assert "lost 0" in text


def test_printed_scaledobject_is_valid_and_carries_the_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from keda_llm.simulator.control import parse_scaledobjects

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert demo.run(parser.parse_args(["--print-scaledobject"])) == 0
    (so,) = parse_scaledobjects(capsys.readouterr().out)  # validated against KEDA's CRD
    assert (so.namespace, so.name, so.min_replicas, so.max_replicas) == ("demo", "llama-8b", 0, 6)
    assert (so.polling_interval_s, so.cooldown_period_s) == (2, 10)
    (trigger,) = so.triggers
    assert trigger.is_push
    assert trigger.metadata["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert (trigger.metadata["stableWindow"], trigger.metadata["idleTimeout"]) == ("20s", "20s")
    from keda_llm.scaler.config import parse_metadata

    cfg = parse_metadata(trigger.metadata)  # the scaler accepts every key
    assert cfg.scale_to_zero is True
    # wakes and scale-ups warm the weights on the exporters; the cold start is the demo's (9 s at 180 s)
    assert (cfg.warm_path, cfg.cold_start) == ("/models/llama-8b", 9.0)


def _demo_interrupted(until: Callable[[Any], None]) -> tuple[str, str, int]:
    """Run `keda-llm demo`, send it SIGINT once `until(stdout)` returns, and give (stdout, stderr, exit
    code) with the traceback checks every Ctrl-C test shares."""
    import signal
    import subprocess
    import sys

    # a shell that runs the tests in the background hands its children SIGINT ignored (and Python then
    # installs no KeyboardInterrupt handler): give the demo the default disposition, as a terminal would
    proc = subprocess.Popen([sys.executable, "-m", "keda_llm.cli", "demo", "--duration", "60", "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        until(proc.stdout)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for noise in ("Traceback", "Exception ignored", "Unclosed client session", "Task was destroyed",
                  "RuntimeError"):  # each once printed under the summary, which then looked like a crash
        assert noise not in err, err
    return out, err, proc.returncode


def test_ctrl_c_counts_requests_in_flight_as_interrupted_not_lost() -> None:
    """The intro says Ctrl-C ends early with a summary: requests cut off in flight are not 'lost'."""
    def into_the_spike(stdout: Any) -> None:  # when requests are surely in flight
        for line in stdout:
            if "] spike" in line:
                break
        time.sleep(1.0)

    out, _, code = _demo_interrupted(into_the_spike)
    summary = out[out.index("Summary"):]
    assert "lost 0" in summary and "FAILED" not in summary, summary
    assert "stopped early (Ctrl-C)" in summary and "interrupted in flight" in summary, summary
    assert code == 130


def test_ctrl_c_while_starting_ends_with_the_summary_not_a_traceback() -> None:
    """Ctrl-C before the script starts (the scaler still waiting for its first scrape) stops the demo
    there: the parts are torn down, no request was sent, and the summary says it stopped early."""
    def at_the_header(stdout: Any) -> None:  # every part is up, the data not yet collected
        first = stdout.readline()
        assert first.startswith("keda-llm demo:"), first

    out, _, code = _demo_interrupted(at_the_header)
    summary = out[out.index("Summary"):]
    assert "stopped early (Ctrl-C): 0 requests were in flight" in summary, summary
    assert "lost 0" in summary and "FAILED" not in summary, summary
    assert code == 130


def test_ctrl_c_sets_the_flag_and_a_second_one_raises() -> None:
    """The first Ctrl-C only sets the flag the run loop reads (raised wherever the main thread was, it
    once surfaced inside a weakref callback as 'Exception ignored'); a second raises, and the caller's
    handler is back afterwards."""
    import os
    import signal

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        flag = threading.Event()
        with pytest.raises(KeyboardInterrupt), demo._ctrl_c_sets(flag):
            os.kill(os.getpid(), signal.SIGINT)
            assert flag.wait(5.0)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5.0)  # the handler raises here, in the main thread
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # ignored (a background shell's children): left ignored, never turned into a flag
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        flag = threading.Event()
        with demo._ctrl_c_sets(flag):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        assert not flag.is_set() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, saved)


def test_a_cancelled_load_sends_nothing_more_and_keeps_its_requests_in_flight() -> None:
    """Ctrl-C cancels the load before the world stops: what was in flight stays counted in flight (cut off
    by the user, not lost), and the schedule's later requests are never sent (sent on into a world being
    torn down, 261 of them failed and the summary called them lost)."""
    import http.server

    from keda_llm.demo_traffic import Load, LoopThread, Send

    release = threading.Event()

    class Holding(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # holds every request until the test ends
            release.wait(30)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Holding)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    t0 = time.monotonic()
    load = Load(f"http://127.0.0.1:{server.server_address[1]}/v1/completions", "m",
                [Send(0.1 * i, 8, 4) for i in range(100)], lambda: time.monotonic() - t0)
    loop = LoopThread()
    try:
        run = loop.spawn(load.run())
        while load.stats.sent < 3:
            time.sleep(0.02)
        loop.call(load.cancel())
        sent = load.stats.sent
        time.sleep(0.5)  # five more sends were due by now
        assert load.stats.sent == sent < 100
        run.result(5)
        assert load.done and load.stats.in_flight == sent and load.stats.answered == 0
    finally:
        release.set()
        loop.close()
        server.shutdown()
