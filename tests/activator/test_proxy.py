"""The activator over real loopback HTTP with replicas ready: SSE pass-through, routing, EndpointSlices,
admin authentication, and the graceful shutdown's drain."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
from activator_harness import FakeModel, Server, act_url, expected_stream, model_config, run, start_activator, wait_for
from aiohttp import web

from keda_llm.activator.config import ActivatorConfig, KubeConfig, ModelConfig, StaticEndpoint
from keda_llm.activator.core import RoutingRules
from keda_llm.activator.endpoints import Endpoint, slice_endpoints


async def _stop(act: Any, *servers: Any) -> None:
    await act.stop()
    for s in servers:
        if s is not None and s.server is not None:
            await s.server.close()


def test_sse_passes_through_chunk_by_chunk_before_the_stream_ends() -> None:
    async def main() -> None:
        model = await FakeModel(chunks=6, gap=0.15).start()
        act = await start_activator(ActivatorConfig(models=(model_config("m", (model.url,)),), default_model="m",
                                                    probe_interval=0.05))
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")))
            async with aiohttp.ClientSession() as s:
                t0 = time.monotonic()
                arrivals: list[tuple[float, bytes]] = []
                async with s.post(act_url(act) + "/v1/chat/completions", headers={"X-Req": "s1"},
                                  json={"model": "m", "stream": True}) as r:
                    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
                    async for chunk in r.content.iter_any():
                        arrivals.append((time.monotonic() - t0, chunk))
            total = arrivals[-1][0]
            assert b"".join(c for _, c in arrivals) == expected_stream("s1", 6)
            assert total >= 6 * 0.15 - 0.05
            assert arrivals[0][0] < 0.5 * total  # the first event came long before the end
            assert len(arrivals) >= 5  # events arrive one by one, not as one buffered body
        finally:
            await _stop(act, model)

    run(main())


def test_routes_to_the_least_loaded_endpoint_by_exporter_metrics_else_by_outstanding() -> None:
    async def main() -> None:
        busy, idle = FakeModel(name="busy", delay=0.2), FakeModel(name="idle", delay=0.2)
        await busy.start()
        await idle.start()
        body = "".join(f'llm_kv_cache_usage_ratio{{model="m",pod="{pod}"}} {kv}\n'
                       f'llm_requests_waiting{{model="m",pod="{pod}"}} {waiting}\n'
                       for pod, kv, waiting in (("busy-0", 0.8, 6), ("idle-0", 0.2, 0)))

        async def exposition(request: web.Request) -> web.Response:
            return web.Response(text=body, content_type="text/plain")
        app = web.Application()
        app.router.add_get("/metrics", exposition)
        exporter = await Server(app).start()
        eps = (StaticEndpoint(busy.url, "busy-0"), StaticEndpoint(idle.url, "idle-0"))
        act = await start_activator(ActivatorConfig(
            models=(model_config("m", eps),), default_model="m", probe_interval=0.05,
            exporters=(exporter.url + "/metrics",), exporters_interval=0.05))
        plain = await start_activator(ActivatorConfig(
            models=(model_config("m", eps),), default_model="m", probe_interval=0.05))
        try:
            await wait_for(lambda: len(act.endpoints.ready("m")) == 2 and len(plain.endpoints.ready("m")) == 2)
            await wait_for(lambda: act.loads.get("m", "busy-0") is not None)
            async with aiohttp.ClientSession() as s:
                async def call(a: Any) -> str:
                    async with s.post(act_url(a) + "/v1/completions", json={"model": "m"}) as r:
                        return r.headers["X-Served-By"]
                by_metrics = await asyncio.gather(*(call(act) for _ in range(10)))
                # 10 x 0.01 outstanding weight never outweighs 0.6 of KV and 6 waiting
                assert by_metrics == ["idle"] * 10
                by_outstanding = await asyncio.gather(*(call(plain) for _ in range(10)))
                assert sorted(by_outstanding) == ["busy"] * 5 + ["idle"] * 5
                async with s.get(act_url(act, "admin") + "/metrics") as r:
                    text = await r.text()
                assert f'keda_llm_activator_forwarded_total{{endpoint="{idle.url}",model="m"}} 10.0' in text
        finally:
            await _stop(plain)
            await _stop(act, busy, idle)
            await exporter.close()

    run(main())


def test_shutdown_drains_held_requests_to_ready_endpoints_and_answers_the_rest_503() -> None:
    async def main() -> None:
        up = await FakeModel(delay=0.3).start()
        down = await FakeModel(ready=False).start()
        act = await start_activator(ActivatorConfig(
            models=(model_config("up", (up.url,)), model_config("down", (down.url,), scaled_object="")),
            probe_interval=0.05, routing=RoutingRules(max_outstanding=1), shutdown_grace=5))
        try:
            await wait_for(lambda: bool(act.endpoints.ready("up")))
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
                async def call(model: str, rid: str) -> tuple[str, int, str | None, bytes]:
                    async with s.post(act_url(act) + "/v1/completions", json={"model": model},
                                      headers={"X-Req": rid}) as r:
                        return rid, r.status, r.headers.get("Retry-After"), await r.read()
                tasks = [asyncio.create_task(call("up", f"u{i}")) for i in range(5)]
                tasks += [asyncio.create_task(call("down", f"d{i}")) for i in range(3)]
                # one in flight to "up" (its cap is 1), four held behind it, three held for "down"
                await wait_for(lambda: len(act.models["up"].queue) == 4 and len(act.models["down"].queue) == 3)
                stopping = asyncio.create_task(act.stop())
                results = await asyncio.gather(*tasks)
                await stopping
            by_id = {rid: (st, ra, b) for rid, st, ra, b in results}
            for i in range(5):
                assert by_id[f"u{i}"][0] == 200 and json.loads(by_id[f"u{i}"][2])["id"] == f"u{i}"
            for i in range(3):
                st, ra, b = by_id[f"d{i}"]
                assert st == 503 and ra is not None and int(ra) >= 1
                assert json.loads(b)["error"]["type"] == "shutdown"
            assert sorted(up.seen) == [f"u{i}" for i in range(5)] and down.seen == []
        finally:
            await _stop(act, up, down)

    run(main())


def test_admin_needs_the_bearer_token_and_health_and_unknown_models(tmp_path: Path) -> None:
    token = tmp_path / "admin"
    token.write_text("adm1n")

    async def main() -> None:
        act = await start_activator(ActivatorConfig(
            models=(model_config("m", ("http://127.0.0.1:9",), scaled_object=""),), admin_token_file=str(token)))
        try:
            async with aiohttp.ClientSession() as s:
                admin = act_url(act, "admin")
                async with s.get(admin + "/admin/queues") as r:
                    assert r.status == 401
                async with s.get(admin + "/admin/queues", headers={"Authorization": "Bearer adm1nX"}) as r:
                    assert r.status == 401
                async with s.get(admin + "/admin/queues", headers={"Authorization": "Bearer adm1n"}) as r:
                    assert r.status == 200 and (await r.json())["m"]["held"] == 0
                async with s.get(admin + "/healthz") as r:
                    assert r.status == 200
                async with s.post(act_url(act) + "/v1/completions", json={"model": "other"}) as r:
                    assert r.status == 404 and "other" in (await r.json())["error"]["message"]
                async with s.post(act_url(act) + "/v1/completions", data=b"x" * (2 * 1024 * 1024)) as r:
                    assert r.status == 413
        finally:
            await act.stop()

    run(main())


def _slice(name: str, ips: list[tuple[str, bool]], port: int, pod_prefix: str = "p") -> dict[str, Any]:
    return {"metadata": {"name": name}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": ready},
                           "targetRef": {"kind": "Pod", "name": f"{pod_prefix}{i}"}}
                          for i, (ip, ready) in enumerate(ips)]}


def test_slice_endpoints_keeps_ready_ones_on_the_chosen_port() -> None:
    m = ModelConfig(name="m", service="svc", namespace="llm", port_name="http")
    s = _slice("a", [("10.0.0.1", True), ("10.0.0.2", False)], 8000)
    s["endpoints"].append({"addresses": ["10.0.0.3"], "conditions": {"ready": True, "terminating": True}})
    s["endpoints"].append({"addresses": ["10.0.0.4"], "conditions": {}})  # unknown reads as ready
    assert slice_endpoints(s, m) == [Endpoint("http://10.0.0.1:8000", "p0"), Endpoint("http://10.0.0.4:8000", "")]
    assert slice_endpoints(s, ModelConfig(name="m", service="svc", namespace="llm", port=9000)) == []
    s6 = {**_slice("b", [("fd00::1", True)], 8000), "addressType": "IPv6"}
    assert slice_endpoints(s6, m) == [Endpoint("http://[fd00::1]:8000", "p0")]


def test_endpointslice_watch_wakes_held_requests_when_a_replica_turns_ready(tmp_path: Path) -> None:
    """A fake API server lists one slice with its endpoint not ready, then a watch event turns it ready:
    the held request is forwarded. The activator only ever reads (GET) the API."""
    token = tmp_path / "token"
    token.write_text("kube-token")

    async def main() -> None:
        model = await FakeModel().start()
        mport = model.server.port  # type: ignore[union-attr]
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        methods: list[tuple[str, str, str]] = []

        async def slices(request: web.Request) -> web.StreamResponse:
            methods.append((request.method, request.path, request.headers.get("Authorization", "")))
            assert request.query["labelSelector"] == "kubernetes.io/service-name=llama"
            if request.query.get("watch") != "true":
                return web.json_response({"kind": "EndpointSliceList", "metadata": {"resourceVersion": "7"},
                                          "items": [_slice("llama-x", [("127.0.0.1", False)], mport)]})
            resp = web.StreamResponse()
            await resp.prepare(request)
            while True:
                await resp.write(json.dumps(await events.get()).encode() + b"\n")

        app = web.Application()
        app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices", slices)
        kube = await Server(app).start()
        m = ModelConfig(name="m", namespace="llm", service="llama", port_name="http")
        act = await start_activator(ActivatorConfig(
            models=(m,), default_model="m",
            kubernetes=KubeConfig(api_server=kube.url, token_file=str(token), ca_file="")))
        try:
            async with aiohttp.ClientSession() as s:
                req = asyncio.create_task(s.post(act_url(act) + "/v1/completions", json={"model": "m"},
                                                 headers={"X-Req": "k1"}))
                await wait_for(lambda: len(act.models["m"].queue) == 1, what="held")
                await asyncio.sleep(0.1)
                assert model.seen == []
                await events.put({"type": "MODIFIED", "object": _slice("llama-x", [("127.0.0.1", True)], mport)})
                r = await req
                assert r.status == 200 and (await r.json())["id"] == "k1"
                r.release()
            assert {meth for meth, _, _ in methods} == {"GET"}
            assert all(auth == "Bearer kube-token" for _, _, auth in methods)
        finally:
            await _stop(act, model)
            await kube.close()

    run(main())


def test_slice_endpoints_of_any_shape_give_endpoints_or_none() -> None:
    """The API server's objects are read defensively: a field of the wrong shape contributes nothing (seeded fuzz
    of mutated slices; an `AttributeError` here would have killed the model's watcher)."""
    import random

    from fuzzing import mutate_tree

    m = ModelConfig(name="m", service="svc", namespace="llm", port_name="http")
    base = _slice("a", [("10.0.0.1", True), ("10.0.0.2", False)], 8000)
    rng = random.Random(20261130)
    kept = 0
    for _ in range(5000):
        got = slice_endpoints(mutate_tree(rng, base, ("ports", "endpoints", "addressType")), m)
        assert all(isinstance(e, Endpoint) and e.url.startswith("http://") for e in got)
        kept += bool(got)
    assert kept > 500


def test_a_malformed_watch_event_relists_and_the_watch_goes_on(tmp_path: Path) -> None:
    """Events of the wrong shape (not an object, an object without a name, a list for an object) made the
    model's watcher die, silently: its endpoints then stayed as they were for good. Now each is logged and
    counted, the watcher lists again, and the next good event is read."""
    async def main() -> None:
        model = await FakeModel().start()
        mport = model.server.port  # type: ignore[union-attr]
        # one watch connection per script: each bad event ends its watch, the watcher lists and watches again
        scripts: list[list[object]] = [
            [[1, 2]], [{"type": "MODIFIED", "object": {"metadata": {}}}], [{"type": "MODIFIED", "object": [1]}],
            [{"type": "ADDED", "object": {"metadata": {"name": "odd"}, "ports": "x", "endpoints": [3]}},
             {"type": "MODIFIED", "object": _slice("llama-x", [("127.0.0.1", True)], mport)}]]
        watches = 0

        async def slices(request: web.Request) -> web.StreamResponse:
            nonlocal watches
            if request.query.get("watch") != "true":
                return web.json_response({"kind": "EndpointSliceList", "metadata": {"resourceVersion": "7"},
                                          "items": [_slice("llama-x", [("127.0.0.1", False)], mport)]})
            resp = web.StreamResponse()
            await resp.prepare(request)
            watches += 1
            for event in scripts[min(watches, len(scripts)) - 1]:
                await resp.write(json.dumps(event).encode() + b"\n")
            await asyncio.sleep(3600)  # the watch stays open, as the API server's does
            return resp

        app = web.Application()
        app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices", slices)
        kube = await Server(app).start()
        m = ModelConfig(name="m", namespace="llm", service="llama", port_name="http")
        act = await start_activator(ActivatorConfig(
            models=(m,), default_model="m", kubernetes=KubeConfig(api_server=kube.url, token_file="", ca_file="")))
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")), timeout=20, what="the good event read")
            assert [e.url for e in act.endpoints.ready("m")] == [f"http://127.0.0.1:{mport}"]
            assert watches == 4  # three bad events, three lists again; the fourth watch's odd slice is read as none
        finally:
            await _stop(act, model)
            await kube.close()

    run(main())
