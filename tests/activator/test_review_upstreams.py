"""Review repros: what an upstream (or a client) does at the socket level that the proxy mishandles."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from activator_harness import FakeModel, Server, act_url, model_config, run, start_activator, wait_for
from aiohttp import web

from keda_llm.activator.config import ActivatorConfig, KubeConfig
from keda_llm.activator.endpoints import Endpoint


def test_a_request_an_engine_worked_on_and_then_died_on_is_not_replayed_to_another_replica() -> None:
    """proxy.py:360-372: `_ConnectFailed(sent=True)` (any ServerDisconnectedError before headers) is resent once, meant
    for an idle pooled connection the engine closed just then. But the same error comes from an engine that took
    the request, worked on it (prefill) and died (OOM on this prompt): the POST goes to a second replica, which does
    the work again (and dies too: a query of death takes two replicas). Only a close that cannot have started the
    request (a reused pooled connection, closed before any response byte and at once) may be resent."""
    posts: list[str] = []

    def engine(name: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    lines = head.decode("latin-1").split("\r\n")
                    method = lines[0].split(" ")[0]
                    hdrs = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                    await reader.readexactly(int(hdrs.get("content-length", "0")))
                    if method == "GET":
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        await writer.drain()
                        continue
                    posts.append(name)
                    await asyncio.sleep(1.0)  # a second of prefill, then the process dies on this prompt
                    writer.transport.abort()
                    return
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
        return serve

    async def main() -> None:
        a = await asyncio.start_server(engine("A"), "127.0.0.1", 0)
        b = await asyncio.start_server(engine("B"), "127.0.0.1", 0)
        urls = tuple(f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in (a, b))
        act = await start_activator(ActivatorConfig(models=(model_config("m", urls),), default_model="m",
                                                    probe_interval=3600))
        try:
            await wait_for(lambda: len(act.endpoints.ready("m")) == 2)
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/completions",
                                                            json={"model": "m", "prompt": "poison"}) as r:
                assert r.status == 502
            assert len(posts) == 1, f"the request was sent to {posts}: replayed after an engine had worked on it"
        finally:
            await act.stop()
            a.close()
            b.close()

    run(main())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_an_https_replica_whose_certificate_does_not_verify_is_a_502_at_once_not_a_hold_until_max_wait(
        tmp_path: Path) -> None:
    """proxy.py:555: ClientConnectorCertificateError is a ClientConnectorError, so a TLS failure is taken for the
    scale-down race: the endpoint is set aside, the request held and retried every second until max_wait, and the
    client gets 503 "did not become ready in time" (5 min by default) with nothing logged above INFO. With
    EndpointSlices (`scheme: https`) the URL is the pod IP, which a serving certificate rarely names, and there is no
    key to give the upstreams' CA: every request ends so."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=llama.llm.svc"], check=True, capture_output=True)

    async def main() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(cert), str(key))
        runner = web.AppRunner(FakeModel().app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
        url = f"https://127.0.0.1:{runner.addresses[0][1]}"
        cfg = ActivatorConfig(models=(model_config("m", (), service="llama", scheme="https", max_wait=3.0),),
                              default_model="m", kubernetes=KubeConfig(api_server="http://127.0.0.1:1"))
        act = await start_activator(cfg)
        try:
            act.endpoints.set("m", [Endpoint(url)])  # as the EndpointSlice watcher would
            t0 = time.monotonic()
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/completions", json={"model": "m"}) as r:
                status, took = r.status, time.monotonic() - t0
            assert status == 502 and took < 1.5, f"{status} after {took:.1f} s (held until max_wait)"
        finally:
            await act.stop()
            await runner.cleanup()

    run(main())


def test_a_client_that_stops_reading_does_not_hold_its_replica_for_ever() -> None:
    """proxy.py:585-592: `write(chunk)` has no bound (read_timeout is suspended around it), so a client that keeps
    its connection open but stops reading (a hung consumer, a partitioned peer that never RSTs) holds the upstream
    stream, its `outstanding` count (a `max_outstanding` slot) and the shutdown's wait, for as long as the socket
    lives. write_timeout (here 1 s) bounds each write: the slot was still held after 6 s."""
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(100_000):
            await resp.write(b"data: " + b"x" * 4096 + b"\n\n")
            await asyncio.sleep(0.001)
        await resp.write_eof()
        return resp

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_post("/v1/completions", stream)
        up = await Server(app).start()
        act = await start_activator(ActivatorConfig(models=(model_config("m", (up.url,)),), default_model="m",
                                                    read_timeout=1.0, write_timeout=1.0))
        sock = socket.socket()
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", act.ports["proxy"]))
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")  # and never reads
            await wait_for(lambda: bool(act.models["m"].outstanding), what="the stream started")
            await asyncio.sleep(6.0)
            assert not act.models["m"].outstanding, "a client that stopped reading still holds its replica's slot"
        finally:
            sock.close()
            await act.stop()
            await up.close()

    run(main())
