"""Review repros: request bodies and model names that make the proxy answer 500 (a traceback in the log) or
forward a body the replica cannot parse. Each test states the right behaviour and fails on the current code."""

from __future__ import annotations

import aiohttp
import pytest
from activator_harness import Server, act_url, model_config, run, start_activator, wait_for
from aiohttp import web

from keda_llm.activator.config import ActivatorConfig, parse


async def _echo() -> tuple[Server, list[bytes]]:
    seen: list[bytes] = []

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def complete(request: web.Request) -> web.Response:
        seen.append(await request.read())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    return await Server(app).start(), seen


def test_a_default_model_given_as_an_alias_serves_requests_naming_no_model() -> None:
    """config.check accepts an alias as default_model ("not a configured model name" checks names and aliases),
    then proxy.py:346 `self.models[route.model]` is a KeyError: every request naming no model is a 500."""
    async def main() -> None:
        up, _ = await _echo()
        cfg = parse({"default_model": "llama-8b",
                     "models": [{"name": "m", "aliases": ["llama-8b"], "endpoints": [up.url]}]})
        act = await start_activator(cfg)
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")))
            async with aiohttp.ClientSession() as s, \
                    s.post(act_url(act) + "/v1/completions", json={"prompt": "hi"}) as r:
                assert r.status == 200, (r.status, await r.text())
        finally:
            await act.stop()
            await up.close()

    run(main())


@pytest.mark.parametrize("body", [
    b'{"model":"a","prompt":"cut \\ud83d"}',  # an alias's body re-encoded by `_renamed`: UnicodeEncodeError, 500
    b"[" * 100_000,  # `_body_model`: json.loads raises RecursionError, not ValueError: 500
    b'{"model":"a","temperature":1e400}',  # `_renamed` writes the bare word Infinity: not JSON at the replica
], ids=["lone-surrogate", "deep-nesting", "float-overflow"])
def test_bodies_that_are_json_but_odd_are_answered_not_500_and_never_forwarded_as_invalid_json(body: bytes) -> None:
    """`_renamed` (proxy.py:670) re-encodes an alias's body: a lone surrogate escape (a JS string cut inside an emoji;
    JSON.stringify writes it as \\ud83d) raises UnicodeEncodeError -> 500; a number past a float (1e400) goes on as
    the bare word `Infinity`, which is not JSON. `_body_model` (proxy.py:633) lets RecursionError out of
    json.loads -> 500 (and a traceback logged per request)."""
    async def main() -> None:
        up, seen = await _echo()
        act = await start_activator(ActivatorConfig(models=(model_config("m", (up.url,), aliases=("a",)),)))
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")))
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/completions", data=body) as r:
                status = r.status
            assert status != 500, "answered 500 (a traceback in the log)"
            assert not any(b"Infinity" in b or b"NaN" in b for b in seen), f"forwarded as invalid JSON: {seen}"
        finally:
            await act.stop()
            await up.close()

    run(main())
