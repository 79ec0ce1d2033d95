"""Review repros: background work that dies without a word, and the held queue's own bookkeeping."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from activator_harness import model_config, run, start_activator

from keda_llm.activator.config import ActivatorConfig, KubeConfig
from keda_llm.activator.core import HeldQueue, RoutingRules
from keda_llm.activator.endpoints import Endpoint
from keda_llm.activator.proxy import Activator


def test_a_bad_kubernetes_ca_file_is_reported_not_a_watcher_that_silently_never_runs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """endpoints.py:188 builds the SSL context inside the watcher task (`SliceWatcher.run`), outside `_loop`'s
    try: a ca_file that exists but holds no certificate raises ssl.SSLError there, the task ends, and its exception
    sits in Activator._tasks until stop() gathers it with return_exceptions=True. Nothing is logged; the model never
    gets an endpoint; every request is held until max_wait."""
    ca = tmp_path / "ca.crt"
    ca.write_text("not a certificate\n")
    cfg = ActivatorConfig(models=(model_config("m", (), service="llama"),), default_model="m",
                          kubernetes=KubeConfig(api_server="https://127.0.0.1:1", ca_file=str(ca),
                                                token_file=str(tmp_path / "none")))

    async def main() -> None:
        try:
            act = await start_activator(cfg)
        except ValueError:  # refused at start (ssl.SSLError is an OSError; a ConfigError a ValueError): fine
            return
        try:
            await asyncio.sleep(1.0)
            said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert said, "the EndpointSlice watcher died on the CA file without a word"
        finally:
            await act.stop()

    with caplog.at_level(logging.INFO):
        run(main())


def test_held_requests_whose_clients_left_together_do_not_recurse_when_a_slot_frees() -> None:
    """proxy.py:460-468 and 438-445: with routing.max_outstanding, `_dispatch` hands back an endpoint whose ticket's
    client had left through `_release`, which calls `_dispatch` again: one stack frame pair per such ticket. Clients
    that give up together (a batch client's shared timeout, an LB idle timeout over a burst) leave their futures
    cancelled before their handlers run; a slot freeing then (a request ending, the ticker) recurses once per ticket.
    At ~330 of them: RecursionError, raised in the ending request's handler, or in the ticker / the endpoint
    prober, whose tasks have no guard and then stop for good (no more expiry; endpoints frozen)."""
    async def main() -> None:
        url = "http://127.0.0.1:9"
        act = Activator(ActivatorConfig(models=(model_config("m", (url,)),), default_model="m",
                                        routing=RoutingRules(max_outstanding=1)))
        st = act.models["m"]
        act.endpoints.set("m", [Endpoint(url)])
        st.outstanding[url] = 1  # one request in flight: the replica is at its cap
        loop = asyncio.get_running_loop()
        for _ in range(600):  # held, their clients gone in the same loop turn (handlers not yet resumed)
            offer = st.queue.offer(0, 0.0, 1)
            ticket = offer.ticket  # type: ignore[union-attr]
            ticket.handle = fut = loop.create_future()
            fut.cancel()
        act._release(st, url)  # the request in flight ends
        assert st.outstanding == {} and len(st.queue) == 0

    run(main())


def test_a_request_held_again_keeps_its_arrival_so_the_lane_stays_in_order() -> None:
    """`expire` stops at the first held ticket of a lane, assuming arrival order. The proxy held a request again
    after a failed connect with the time the connect failed (up to connect_timeout after it arrived), later than
    tickets held behind it meanwhile: those expired only when it did, and `oldest()` (admin's
    oldest_held_seconds) reported the newer time. It now passes the request's arrival (proxy.py `arrived`),
    which keeps the lane in order: this is the contract that relies on."""
    q = HeldQueue("m", max_held=10, max_wait=10.0)
    a = q.offer(0, 1.0, 1).ticket  # type: ignore[union-attr]  # A held at t=1 (the only endpoint is at its cap)
    b = q.requeue(0, 0.0)  # B arrived at t=0, forwarded, its connect failed later: held again with its arrival
    assert q.oldest() == 0.0
    expired = q.expire(11.0)
    assert a in expired and b in expired
