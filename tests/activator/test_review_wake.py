"""Review repro: `max_held: 0` (accepted by config, range [0, 10M]) means a model at zero is never woken: a refused
request never reaches `_wake` (proxy.py:389-392 raise before it) and the held gauge, the scaler's activationQuery,
stays 0. The client is told 429 "is starting" with Retry-After 120 for a model nothing is starting."""

from __future__ import annotations

import asyncio

import aiohttp
from activator_harness import FakeModel, FakeScaler, act_url, model_config, run, start_activator

from keda_llm.activator.config import ActivatorConfig


def test_max_held_zero_still_wakes_the_model() -> None:
    async def main() -> None:
        fm = await FakeModel(ready=False).start()
        sc = await FakeScaler().start()
        act = await start_activator(ActivatorConfig(models=(model_config("m", (fm.url,), max_held=0),),
                                                    default_model="m", scaler=sc.url))
        try:
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/completions", json={"model": "m"}) as r:
                assert r.status == 429
            await asyncio.sleep(0.5)
            assert sc.calls, "a request for a model at zero was refused and the model was never woken"
        finally:
            await act.stop()
            assert fm.server is not None and sc.server is not None
            await fm.server.close()
            await sc.server.close()

    run(main())
