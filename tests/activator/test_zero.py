"""The activator over real loopback HTTP at zero: holding, waking, bounding, and the scale-down race."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import aiohttp
from activator_harness import (
    FakeModel,
    FakeScaler,
    act_url,
    expected_json,
    expected_stream,
    model_config,
    run,
    start_activator,
    wait_for,
)

from keda_llm.activator.config import ActivatorConfig
from keda_llm.activator.core import RoutingRules


def held(text: str, model: str = "m") -> float:
    pattern = r'^keda_llm_activator_held_requests\{model="' + re.escape(model) + r'"\} (\S+)$'
    m = re.search(pattern, text, re.M)
    assert m, text
    return float(m.group(1))


async def metrics(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url + "/metrics") as r:
        return await r.text()


def test_500_requests_at_zero_each_answered_once_429_past_the_bound_and_the_model_woken(tmp_path: Path) -> None:
    """400 requests held for a model at zero whose first replica is ready 2 s after the wake, 40 of
    them disconnecting while held, then 100 more (40 fit the freed places, 60 are refused); a third
    streaming, two priority classes."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    cold_start = 2.0

    async def main() -> None:
        model = await FakeModel(ready=False, chunks=4, gap=0.005).start()
        scaler = FakeScaler(token="s3cret")

        async def come_up() -> None:
            await asyncio.sleep(cold_start)
            model.ready = True
        scaler.on_activate = come_up
        await scaler.start()
        cfg = ActivatorConfig(
            models=(model_config("m", (model.url,), max_held=400, max_wait=60, cold_start=30),),
            default_model="m", scaler=scaler.url, activation_token_file=str(token),
            priority_classes=("premium",), probe_interval=0.05, routing=RoutingRules(max_outstanding=16))
        act = await start_activator(cfg)
        results: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def call(i: int) -> None:
                rid = f"r{i}"
                stream = i % 3 == 0
                headers = {"X-Req": rid, "X-Priority": "premium" if i % 4 == 0 else "standard"}
                body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
                async with s.post(act_url(act) + "/v1/chat/completions", json=body, headers=headers) as r:
                    assert rid not in results
                    results[rid] = (r.status, await r.read(), dict(r.headers))

            first = {i: asyncio.create_task(call(i)) for i in range(400)}
            await wait_for(lambda: len(act.models["m"].queue) == 400, what="400 held")
            t_held = time.monotonic()
            leaving = [i for i in range(400) if i % 10 == 7]  # 40 clients give up while held
            for i in leaving:
                first[i].cancel()
            await wait_for(lambda: len(act.models["m"].queue) == 360, what="40 disconnects seen")
            assert held(await metrics(s, act_url(act, "admin"))) == 360  # the scaler's activationQuery
            rest = [asyncio.create_task(call(i)) for i in range(400, 500)]
            await asyncio.gather(*rest, *(t for i, t in first.items() if i not in leaving))
            waited = time.monotonic() - t_held
        try:
            connected = {f"r{i}" for i in range(500) if i not in leaving}
            assert set(results) == connected
            refused = {rid for rid, (st, _, _) in results.items() if st == 429}
            assert len(refused) == 60
            for rid in refused:
                st, body, headers = results[rid]
                assert int(headers["Retry-After"]) >= 1
                assert json.loads(body)["error"]["type"] == "queue_full"
            served = connected - refused
            for rid in served:
                st, body, headers = results[rid]
                assert st == 200, (rid, st, body)
                i = int(rid[1:])
                if i % 3 == 0:
                    assert headers["Content-Type"].startswith("text/event-stream")
                    assert body == expected_stream(rid, 4)
                else:
                    assert json.loads(body) == expected_json(rid)
            # exactly once at the model, never a request that left, never before it was ready
            assert sorted(model.seen) == sorted(served)
            assert model.early == 0
            assert not {f"r{i}" for i in leaving} & set(model.seen)
            assert waited >= cold_start - 0.5
            # premium left the queue first: all of them among the first arrivals (16 slots of slack)
            order = {rid: n for n, rid in enumerate(model.seen)}
            premium = [rid for rid in served if int(rid[1:]) % 4 == 0]
            assert max(order[r] for r in premium) < len(premium) + 16
            # woken at once, with the bearer token, on the scaler's route
            assert scaler.calls and scaler.calls[0] == ("/v1/activate/llm/llama", "Bearer s3cret")
            assert len(act.models["m"].queue) == 0
        finally:
            await act.stop()
            await model.server.close()  # type: ignore[union-attr]
            await scaler.server.close()  # type: ignore[union-attr]

    run(main(), timeout=60)


def test_held_past_max_wait_gets_503_with_retry_after() -> None:
    async def main() -> None:
        model = await FakeModel(ready=False).start()
        cfg = ActivatorConfig(models=(model_config("m", (model.url,), max_wait=0.3, cold_start=45,
                                                   scaled_object=""),),
                              default_model="m", probe_interval=0.05)
        act = await start_activator(cfg)
        try:
            async with aiohttp.ClientSession() as s:
                t0 = time.monotonic()
                async with s.post(act_url(act) + "/v1/completions", json={"model": "m"}) as r:
                    body = await r.json()
                    assert r.status == 503 and body["error"]["type"] == "max_wait"
                    assert 1 <= int(r.headers["Retry-After"]) <= 45
                assert 0.3 <= time.monotonic() - t0 < 1.5
                text = await metrics(s, act_url(act, "admin"))
                assert 'keda_llm_activator_rejects_total{model="m",reason="max_wait"} 1.0' in text
                assert 'keda_llm_activator_wait_seconds_count{model="m",outcome="max_wait"} 1.0' in text
        finally:
            await act.stop()
            await model.server.close()  # type: ignore[union-attr]

    run(main())


def test_scale_down_racing_an_arriving_request_loses_nothing() -> None:
    """The endpoint is still listed as ready when its pod goes away; the request that picked it is
    refused at connect, held again, the model woken, and served by the replica that comes back."""
    async def main() -> None:
        model = await FakeModel().start()
        port = model.server.port  # type: ignore[union-attr]
        scaler = FakeScaler()

        async def come_back() -> None:
            await asyncio.sleep(0.5)
            await model.start(port)
        scaler.on_activate = come_back
        await scaler.start()
        cfg = ActivatorConfig(models=(model_config("m", (model.url,)),), default_model="m",
                              scaler=scaler.url, probe_interval=30)  # the list stays stale: the race
        act = await start_activator(cfg)
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")), what="ready")
            async with aiohttp.ClientSession() as s:
                async with s.post(act_url(act) + "/v1/completions", json={"model": "m"},
                                  headers={"X-Req": "warm"}) as r:
                    assert r.status == 200  # a kept-alive connection now exists, too
                await model.server.close()  # type: ignore[union-attr]  # scaled to zero
                async with s.post(act_url(act) + "/v1/completions", json={"model": "m"},
                                  headers={"X-Req": "racer"}) as r:
                    assert r.status == 200, await r.text()
                    assert (await r.json())["id"] == "racer"
            assert model.seen == ["warm", "racer"]
            assert len(scaler.calls) == 1
        finally:
            await act.stop()
            await model.server.close()  # type: ignore[union-attr]
            await scaler.server.close()  # type: ignore[union-attr]

    run(main())
