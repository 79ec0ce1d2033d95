"""A client that sends its request body slowly, or stops sending it, is answered 408 within `body_timeout`
and its connection closed: it does not hold a place in the activator (the shutdown waits for requests in
flight) or reach an endpoint, and the requests around it are served."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from activator_harness import HOST, FakeModel, act_url, model_config, run, start_activator, wait_for

from keda_llm.activator.config import ActivatorConfig
from keda_llm.activator.proxy import Activator

BODY = b'{"model": "m", "prompt": "hello", "max_tokens": 4}'


@contextlib.asynccontextmanager
async def serving(body_timeout: float) -> AsyncIterator[tuple[FakeModel, Activator]]:
    """A model behind an activator with this `body_timeout`, its endpoint probed ready; both stopped after."""
    model = await FakeModel().start()
    act = await start_activator(ActivatorConfig(models=(model_config("m", (model.url,)),), body_timeout=body_timeout))
    try:
        await wait_for(lambda: bool(act.endpoints.ready("m")), what="the endpoint probed ready")
        yield model, act
    finally:
        await act.stop()
        assert model.server is not None
        await model.server.close()


async def slow_post(port: int, sent: bytes, trickle: float | None) -> tuple[bytes, float]:
    """POST with the whole body's Content-Length, but send only `sent` of it (a byte every `trickle` s after
    that, for ever, when given); returns the answer and how long it took to come."""
    reader, writer = await asyncio.open_connection(HOST, port)
    started = time.monotonic()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(BODY) + sent)
    await writer.drain()

    async def dribble() -> None:
        while trickle is not None:
            await asyncio.sleep(trickle)
            writer.write(b" ")
            await writer.drain()

    task = asyncio.create_task(dribble())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        answer = head + await asyncio.wait_for(reader.readexactly(length), 10)
        took = time.monotonic() - started
        # and the connection is not kept for another request (aiohttp may linger, reading what the client
        # still sends, before it closes: its own bound, 10 s)
        assert b"connection: close" in head.lower()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        writer.close()
    return answer, took


@pytest.mark.parametrize("trickle", [None, 0.05], ids=["stops-sending", "trickles"])
def test_a_body_that_does_not_arrive_is_answered_408_and_the_activator_stays_free(trickle: float | None) -> None:
    async def main() -> None:
        async with serving(0.5) as (model, act):
            answer, took = await slow_post(act.ports["proxy"], BODY[:10], trickle)
            head = answer.split(b"\r\n", 1)[0]
            assert head == b"HTTP/1.1 408 Request Timeout", answer[:200]
            assert b"request body not received within 0.5 s" in answer
            assert 0.5 <= took < 5.0
            assert act.inflight == 0
            assert model.seen == []  # nothing reached the endpoint
            # the activator serves the next request as before
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/completions", data=BODY) as r:
                assert r.status == 200
                await r.read()
            assert len(model.seen) == 1

    run(main())


def test_a_whole_body_within_the_timeout_is_served() -> None:
    """Just under `body_timeout` is not late: the body is read whole and forwarded."""
    async def main() -> None:
        async with serving(2.0) as (model, act):
            reader, writer = await asyncio.open_connection(HOST, act.ports["proxy"])
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.write(BODY[10:])
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            assert len(model.seen) == 1

    run(main())
