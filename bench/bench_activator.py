"""What the activator adds to a streaming request, against a direct request in the same run.

    python bench/bench_activator.py [--streams 200] [--tokens 40] [--rate 50] [--rounds 3] [--held 10000]

Three processes on loopback: a fake OpenAI upstream that streams `--tokens` SSE events per request at
`--rate` tokens/s (each event carries its send time, CLOCK_MONOTONIC, which every process shares), the
activator (`keda-llm activator`, a subprocess), and the load generator (a subprocess of its own), which
keeps `--streams` streams open at once, alternating rounds direct to the upstream and through the
activator. Reported: time to first byte p50/p99 and per-chunk delivery latency (send -> receive) p50/p99
for both paths, the difference (what the activator adds) and the ratio; the activator's CPU seconds per
request (from /proc); then a second activator with its model at zero holds `--held` requests and its
RSS is read (VmRSS) against its RSS idle. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the upstream (its own process) ----

async def upstream(port: int, tokens: int, rate: float) -> None:
    from aiohttp import web

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(tokens):
            if i:
                await asyncio.sleep(1 / rate)
            event = {"id": "cmpl-bench", "object": "chat.completion.chunk", "t": time.monotonic(),
                     "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", complete)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    await asyncio.Event().wait()


# ---- the load generator (its own process) ----

async def load(urls: list[str], streams: int, rounds: int) -> dict[str, Any]:
    import aiohttp
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    out: dict[str, Any] = {u: {"ttfb": [], "chunk": [], "requests": 0, "errors": 0} for u in urls}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one(url: str) -> None:
            rec = out[url]
            t0 = time.monotonic()
            try:
                async with s.post(url + "/v1/chat/completions", data=body,
                                  headers={"Content-Type": "application/json"}) as r:
                    first = True
                    buf = b""
                    async for chunk in r.content.iter_any():
                        now = time.monotonic()
                        if first:
                            rec["ttfb"].append(now - t0)
                            first = False
                        buf += chunk
                        while b"\n\n" in buf:
                            event, buf = buf.split(b"\n\n", 1)
                            if event.startswith(b"data: {"):
                                rec["chunk"].append(now - json.loads(event[6:])["t"])
                rec["requests"] += 1
            except aiohttp.ClientError:
                rec["errors"] += 1

        for _ in range(rounds):
            for url in urls:  # alternate the two paths round by round: same machine, same minute
                await asyncio.gather(*(one(url) for _ in range(streams)))
    return out


async def hold(url: str, n: int, admin: str) -> dict[str, Any]:
    import aiohttp
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        tasks = [asyncio.create_task(s.post(url + "/v1/chat/completions", json={"model": "m"})) for _ in range(n)]
        held = 0.0
        deadline = time.monotonic() + 120
        while held < n and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            async with s.get(admin + "/metrics") as r:
                for line in (await r.text()).splitlines():
                    if line.startswith("keda_llm_activator_held_requests{"):
                        held = float(line.split()[-1])
        print(json.dumps({"held": held}), flush=True)
        sys.stdin.readline()  # the parent has read the RSS
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"held": held}


# ---- the orchestration ----

def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) * 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return cpu, rss


def start_activator(cfg: str, admin: int) -> subprocess.Popen[bytes]:
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115 - the child reads it
    f.write(cfg)
    f.close()
    p = subprocess.Popen([sys.executable, "-m", "keda_llm.cli", "activator", "--config", f.name,
                          "--admin-listen", f"127.0.0.1:{admin}", "--log-level", "WARNING"])
    wait_http(f"http://127.0.0.1:{admin}/healthz")
    return p


def wait_http(url: str, timeout: float = 30) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["main", "upstream", "load", "hold"], default="main")
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--rate", type=float, default=50.0, help="tokens per second per stream")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--held", type=int, default=10_000)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--urls", default="")
    ap.add_argument("--admin", default="")
    a = ap.parse_args()
    if a.role == "upstream":
        asyncio.run(upstream(a.port, a.tokens, a.rate))
        return 0
    if a.role == "load":
        print(json.dumps(asyncio.run(load(a.urls.split(","), a.streams, a.rounds))))
        return 0
    if a.role == "hold":
        asyncio.run(hold(a.urls, a.held, a.admin))
        return 0

    me = [sys.executable, str(Path(__file__).resolve())]
    up_port, act_port, admin_port = free_port(), free_port(), free_port()
    up = subprocess.Popen([*me, "--role", "upstream", "--port", str(up_port), "--tokens", str(a.tokens),
                           "--rate", str(a.rate)])
    procs: list[subprocess.Popen[Any]] = [up]
    try:
        wait_http(f"http://127.0.0.1:{up_port}/health")
        act = start_activator(
            f"listen: 127.0.0.1:{act_port}\nmodels:\n  - name: m\n    endpoints: [http://127.0.0.1:{up_port}]\n",
            admin_port)
        procs.append(act)
        wait_http(f"http://127.0.0.1:{admin_port}/healthz")
        time.sleep(1.5)  # the first probe has found the endpoint ready
        direct, via = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{act_port}"
        cpu0, _ = proc_stat(act.pid)
        res = subprocess.run([*me, "--role", "load", "--urls", f"{direct},{via}", "--streams", str(a.streams),
                              "--rounds", str(a.rounds)], capture_output=True, text=True, check=True)
        cpu1, _ = proc_stat(act.pid)
        out = json.loads(res.stdout)
        d, v = out[direct], out[via]
        # the activator's CPU in the direct rounds is its probes only (idle): all of it is charged here
        cpu_per_req_ms = (cpu1 - cpu0) / max(1, v["requests"]) * 1000

        # 10,000 held: a second activator whose model is at zero (its endpoint refuses connections)
        admin2, act2_port = free_port(), free_port()
        held_cfg = (f"listen: 127.0.0.1:{act2_port}\nmax_held: {a.held * 2}\nmax_wait: 10m\n"
                    f"models:\n  - name: m\n    endpoints: [http://127.0.0.1:{free_port()}]\n")
        act2 = start_activator(held_cfg, admin2)
        procs.append(act2)
        time.sleep(0.5)
        _, rss_idle = proc_stat(act2.pid)
        holder = subprocess.Popen([*me, "--role", "hold", "--urls", f"http://127.0.0.1:{act2_port}",
                                   "--held", str(a.held), "--admin", f"http://127.0.0.1:{admin2}"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(holder)
        assert holder.stdout is not None and holder.stdin is not None
        held = json.loads(holder.stdout.readline())["held"]
        _, rss_held = proc_stat(act2.pid)
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(60)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(30)

    ms = 1000.0
    rows = [("TTFB", d["ttfb"], v["ttfb"]), ("per chunk (send -> receive)", d["chunk"], v["chunk"])]
    print(f"\n{a.streams} concurrent streams x {a.rounds} rounds per path, {a.tokens} tokens at {a.rate:g} tok/s; "
          f"requests: direct {d['requests']} ({d['errors']} errors), "
          f"activator {v['requests']} ({v['errors']} errors)\n")
    print("| measure | direct p50 | direct p99 | activator p50 | activator p99 | added at p99 | ratio p99 |")
    print("|---|---|---|---|---|---|---|")
    for name, dx, vx in rows:
        dp99, vp99 = pct(dx, 99), pct(vx, 99)
        print(f"| {name} | {pct(dx, 50) * ms:.2f} ms | {dp99 * ms:.2f} ms | {pct(vx, 50) * ms:.2f} ms | "
              f"{vp99 * ms:.2f} ms | {(vp99 - dp99) * ms:+.2f} ms | {vp99 / dp99:.2f}x |")
    print(f"\nactivator CPU per streamed request: {cpu_per_req_ms:.2f} ms ({a.tokens} chunks)")
    print(f"RSS with {held:.0f} requests held: {rss_held / 2**20:.0f} MiB (idle {rss_idle / 2**20:.0f} MiB, "
          f"{(rss_held - rss_idle) / max(1, held):.0f} B per held request)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
