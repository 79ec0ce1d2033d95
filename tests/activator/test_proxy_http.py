"""The activator as an HTTP proxy, byte for byte: what reaches the replica is what the client sent, less what
belongs to one connection (RFC 9110 7.6.1). Found by a review that drove it as OpenAI clients and gateways do;
each case failed before its fix:

- the request-target was forwarded decoded: `%23` ended the query, `%2F` became a path separator, `+` a raw
  space the engine's server refused;
- a gzip request body reached the replica decoded but still labelled `Content-Encoding: gzip`;
- aiohttp's client added `Content-Type: application/octet-stream` (FastAPI servers, vLLM's among them, then
  refuse a JSON body sent without one) and `Accept-Encoding`;
- headers that `Connection` names were passed on, both ways;
- an answer without `Content-Type` or `Server` reached the client with aiohttp's (`application/octet-stream`,
  which takes the type's choice from the client, and the activator's own software as the replica's);
- an alias reached the replica, which serves only the configured name;
- `GET /v1/models` was a 404 as soon as a model routed by path prefix;
- a model up and full told clients to retry after a whole cold start."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from activator_harness import HOST, act_url, model_config, run, start_activator, wait_for

from keda_llm.activator.config import ActivatorConfig
from keda_llm.activator.core import RoutingRules
from keda_llm.activator.proxy import Activator

Answer = Callable[[dict[str, Any]], Awaitable[bytes]]


class RawUpstream:
    """A replica that records each request as received (request line, headers, body) and answers `answer`."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.seen: list[dict[str, Any]] = []
        self.answer = answer
        self.url = ""

    async def start(self) -> RawUpstream:
        self._server = await asyncio.start_server(self._conn, HOST, 0)
        self.url = f"http://{HOST}:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def close(self) -> None:
        self._server.close()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                headers = [tuple(x.split(":", 1)) for x in head[1:] if x]
                lower = {k.strip().lower(): v.strip() for k, v in headers}
                body = await reader.readexactly(int(lower.get("content-length", "0")))
                if head[0].startswith("GET /health "):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
                    continue
                req = {"line": head[0], "headers": lower, "names": [k.strip().lower() for k, _ in headers],
                       "body": body}
                self.seen.append(req)
                writer.write(await self.answer(req) if self.answer else
                             b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def proxied(answer: Answer | None = None, model: dict[str, Any] | None = None,
                  **cfg: Any) -> AsyncIterator[tuple[RawUpstream, Activator]]:
    up = await RawUpstream(answer).start()
    models = cfg.pop("models", None) or (model_config("m", (up.url,), aliases=("m-alias",), **(model or {})),)
    act = await start_activator(ActivatorConfig(models=models, probe_interval=0.05, **cfg))
    try:
        await wait_for(lambda: all(act.endpoints.ready(m.name) for m in models), what="ready")
        yield up, act
    finally:
        await act.stop()
        await up.close()


async def raw(act: Activator, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(HOST, act.ports["proxy"])
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    body = await asyncio.wait_for(reader.readexactly(length), 10)
    writer.close()
    return head + body


def post(target: str, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (f"POST {target} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body


BODY = b'{"model":"m","prompt":"hi"}'


def test_the_request_target_is_forwarded_as_the_client_encoded_it() -> None:
    async def main() -> None:
        async with proxied() as (up, act):
            for target in ("/v1/completions?x=a+b", "/v1/completions?q=%23frag&r=1", "/v1/files/abc%2Fdef",
                           "/v1/a%25b", "/v1/models/caf%C3%A9?a=%2B"):
                answer = await raw(act, post(target, BODY, "Content-Type: application/json"))
                assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
                assert up.seen[-1]["line"] == f"POST {target} HTTP/1.1"

    run(main())


def test_a_path_prefix_is_stripped_from_the_raw_target() -> None:
    async def main() -> None:
        up2 = await RawUpstream().start()
        async with proxied(models=(model_config("q", (up2.url,), path_prefix="/qwen"),)) as (_, act):
            answer = await raw(act, post("/qwen/v1/files/a%2Fb?x=a+b", b"{}", "Content-Type: application/json"))
            assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
            assert up2.seen[-1]["line"] == "POST /v1/files/a%2Fb?x=a+b HTTP/1.1"
            # the configured models are listed by the activator itself, a prefix or not
            listed = await raw(act, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            assert listed.startswith(b"HTTP/1.1 200") and b'"id":"q"' in listed.replace(b" ", b"")
        await up2.close()

    run(main())


def test_request_headers_go_as_sent_less_the_hop_by_hop_ones() -> None:
    async def main() -> None:
        async with proxied() as (up, act):
            # no Content-Type, no Accept-Encoding from the client: none added
            await raw(act, post("/v1/completions", BODY, "Connection: keep-alive, X-Secret-Hop", "X-Secret-Hop: 1",
                                "X-Forwarded-For: 1.1.1.1", "X-Forwarded-For: 2.2.2.2"))
            seen = up.seen[-1]
            for added in ("content-type", "accept-encoding", "user-agent", "accept", "x-secret-hop", "connection"):
                assert added not in seen["names"], (added, seen["names"])
            assert seen["headers"]["x-forwarded-for"] == "1.1.1.1, 2.2.2.2, 127.0.0.1"
            # a gzip body is read decoded: it goes on decoded and unlabelled
            await raw(act, post("/v1/completions", gzip.compress(BODY), "Content-Encoding: gzip",
                                "Content-Type: application/json"))
            seen = up.seen[-1]
            assert seen["body"] == BODY and "content-encoding" not in seen["names"]
            assert seen["headers"]["content-type"] == "application/json"

    run(main())


def test_answer_headers_named_by_connection_stay_behind() -> None:
    async def answer(req: dict[str, Any]) -> bytes:
        return (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Internal\r\nX-Internal: secret\r\nX-Request-Id: 7\r\n"
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    async def main() -> None:
        async with proxied(answer) as (_, act):
            got = (await raw(act, post("/v1/completions", BODY))).lower()
            assert b"x-internal" not in got and b"x-request-id: 7" in got

    run(main())


def test_an_answer_gains_no_type_or_server_its_upstream_did_not_send() -> None:
    bare = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    typed = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nServer: engine/1\r\nContent-Length: 2\r\n\r\nok"
    answers = [bare, typed]

    async def answer(req: dict[str, Any]) -> bytes:
        return answers.pop(0)

    def names(got: bytes) -> dict[str, str]:
        lines = got.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
        return {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}

    async def main() -> None:
        async with proxied(answer) as (_, act):
            got = await raw(act, post("/v1/completions", BODY))
            assert got.endswith(b"hello")
            head = names(got)
            assert "content-type" not in head and "server" not in head, head
            assert "date" in head  # a forwarder with a clock appends one (RFC 9110 6.6.1)
            head = names(await raw(act, post("/v1/completions", BODY)))
            assert (head["content-type"], head["server"]) == ("text/plain", "engine/1")
            # the activator's own answers keep their type
            head = names(await raw(act, b"GET /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
            assert head["content-type"].startswith("application/json"), head

    run(main())


def test_an_alias_reaches_the_replica_as_the_served_name() -> None:
    async def main() -> None:
        async with proxied() as (up, act):
            body = json.dumps({"model": "m-alias", "messages": [{"role": "user", "content": "café"}]}).encode()
            assert (await raw(act, post("/v1/chat/completions", body))).startswith(b"HTTP/1.1 200")
            sent = json.loads(up.seen[-1]["body"])
            assert sent == {"model": "m", "messages": [{"role": "user", "content": "café"}]}
            await raw(act, post("/v1/completions", BODY))
            assert up.seen[-1]["body"] == BODY  # the served name: the body goes byte for byte

    run(main())


def test_a_full_model_with_ready_replicas_says_retry_in_seconds_not_a_cold_start() -> None:
    async def slow(req: dict[str, Any]) -> bytes:
        await asyncio.sleep(1.0)
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    async def main() -> None:
        async with (proxied(slow, model={"max_held": 1}, routing=RoutingRules(max_outstanding=1)) as (_, act),
                    aiohttp.ClientSession() as s):
            tasks = [asyncio.create_task(s.post(act_url(act) + "/v1/completions", data=BODY)) for _ in range(3)]
            answers = await asyncio.gather(*tasks)
            codes = sorted(r.status for r in answers)
            full = [r for r in answers if r.status == 429]
            assert codes.count(200) >= 1 and full, codes
            assert all(int(r.headers["Retry-After"]) <= 2 for r in full)  # not the 120 s cold start
            for r in answers:
                r.release()

    run(main())
