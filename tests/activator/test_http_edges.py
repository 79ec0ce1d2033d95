"""The activator against HTTP/1.1 as clients use it at its edges (RFC 9110, 9112), over real loopback
connections. Found by a review that drove it so; each case failed before its fix:

- `HEAD /v1/models` went to a replica (or was a 404 with no default model), where `GET` is answered here;
- `Expect: 100-continue` with a declared body over `max_body_bytes` got a 100, so the client sent the body
  it was about to be refused for, before the 413;
- a request-target in absolute form (`POST http://host/v1/... HTTP/1.1`, which a server must accept: RFC 9112
  3.2.2; clients whose proxy setting names the activator send it) was a 500;
- a body in a content coding aiohttp does not decode (`x-gzip`, or more than one coding) reached the replica
  still encoded but without its `Content-Encoding`;
- the admin token check refused `bearer` (an auth scheme is case-insensitive: RFC 9110 11.1) and answered
  a header that is not UTF-8 with a 500;
- a streamed answer (no length) to an HTTP/1.0 keep-alive client (`ab -k`) never ended: HTTP/1.0 has no
  chunked coding, so the end is the connection's close, and aiohttp kept the connection open.
"""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path
from typing import Any

from activator_harness import HOST, model_config, run
from test_proxy_http import BODY, RawUpstream, post, proxied, raw

from keda_llm.activator.proxy import Activator


async def exchange(act: Activator, request: bytes, port: str = "proxy") -> bytes:
    """Everything the activator sends back on one connection until it closes or goes quiet."""
    reader, writer = await asyncio.open_connection(HOST, act.ports[port])
    writer.write(request)
    await writer.drain()
    got = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 0.5):
            got += chunk
    except asyncio.TimeoutError:
        pass
    writer.close()
    return got


def test_head_of_the_model_list_is_answered_here_like_get_without_a_body() -> None:
    async def main() -> None:
        async with proxied() as (up, act):  # no default model: HEAD was a 404 here
            get = await raw(act, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            # a HEAD, then a GET on the same connection: the HEAD's answer has no body, so the GET's follows it
            both = await exchange(act, b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                                       b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            head, rest = both.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = next(line for line in get.split(b"\r\n") if line.lower().startswith(b"content-length"))
            assert length in head.split(b"\r\n")
            assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(get.split(b"\r\n\r\n", 1)[1])
            assert up.seen == []  # listing models reaches no replica

    run(main())


def test_a_declared_body_over_the_cap_with_expect_is_refused_before_it_is_sent() -> None:
    async def main() -> None:
        async with proxied(max_body_bytes=4096) as (up, act):
            # the headers only: a client that asked for a 100 waits for it before sending its 5000 bytes
            got = await exchange(act, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                      b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 413"), got[:200]
            assert b"100 Continue" not in got and b"connection: close" in got.lower()
            # within the cap the 100 comes and the request is served
            got = await exchange(act, post("/v1/completions", BODY, "Expect: 100-continue"))
            assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"), got[:200]
            # a chunked body (no length declared) over the cap: 413 once read past it, nothing forwarded
            chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + b"1000\r\n" + b"x" * 4096 + b"\r\n" + b"10\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n")
            assert (await raw(act, chunked)).startswith(b"HTTP/1.1 413")
            assert len(up.seen) == 1

    run(main())


def test_an_absolute_form_target_reaches_the_replica_in_origin_form() -> None:
    async def main() -> None:
        up2 = await RawUpstream().start()
        async with proxied(models=(model_config("m", (up2.url,)),
                                   model_config("q", (up2.url,), path_prefix="/qwen"))) as (_, act):
            for target, seen in (("http://example.com/v1/completions?x=a+b%2F", "/v1/completions?x=a+b%2F"),
                                 ("HTTP://Example.com:8080/qwen/v1/files/a%2Fb", "/v1/files/a%2Fb")):
                answer = await raw(act, post(target, BODY, "Content-Type: application/json"))
                assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
                assert up2.seen[-1]["line"] == f"POST {seen} HTTP/1.1"
        await up2.close()

    run(main())


def test_a_body_in_a_coding_not_decoded_here_keeps_its_label() -> None:
    async def main() -> None:
        async with proxied(model={"path_prefix": "/m"}) as (up, act):
            packed = gzip.compress(BODY)
            for coding in ("x-gzip", "gzip, identity"):
                answer = await raw(act, post("/m/v1/completions", packed, f"Content-Encoding: {coding}"))
                assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
                seen = up.seen[-1]
                assert seen["body"] == packed and seen["headers"].get("content-encoding") == coding, seen
            # what aiohttp decoded goes on decoded and unlabelled (as before)
            await raw(act, post("/m/v1/completions", packed, "Content-Encoding: gzip"))
            seen = up.seen[-1]
            assert seen["body"] == BODY and "content-encoding" not in seen["names"]

    run(main())


def test_the_admin_token_scheme_is_case_insensitive_and_odd_bytes_are_a_401(tmp_path: Path) -> None:
    token = tmp_path / "admin"
    token.write_text("adm1n\n")

    async def main() -> None:
        async with proxied(admin_token_file=str(token)) as (_, act):
            def ask(auth: bytes) -> bytes:
                return b"GET /admin/queues HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\n\r\n"

            for auth in (b"Bearer adm1n", b"bearer adm1n", b"BEARER  adm1n"):
                assert (await exchange(act, ask(auth), "admin")).startswith(b"HTTP/1.1 200"), auth
            for auth in (b"Bearer adm1nX", b"Basic adm1n", b"Bearer \xff", b"Bearer adm\xc3\xa9", b"adm1n", b""):
                got = await exchange(act, ask(auth), "admin")
                assert got.startswith(b"HTTP/1.1 401"), (auth, got[:100])

    run(main())


def test_an_answer_of_unknown_length_to_an_http_1_0_keep_alive_client_ends_with_the_connection() -> None:
    async def answer(req: dict[str, Any]) -> bytes:  # an SSE-like answer: chunked, no length
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n3\r\nx\n\n\r\n0\r\n\r\n"

    async def main() -> None:
        async with proxied(answer) as (_, act):
            reader, writer = await asyncio.open_connection(HOST, act.ports["proxy"])
            # HTTP/1.0 has no chunked coding: such a body ends only when the connection closes (RFC 9112 6.3)
            writer.write(b"POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
            await writer.drain()
            got = await asyncio.wait_for(reader.read(), 10)  # to the end: it hung here while the connection stayed
            writer.close()
            head, body = got.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.0 200") and body == b"data: x\n\n", got
            assert b"keep-alive" not in head.lower() and b"transfer-encoding" not in head.lower()

    run(main())
