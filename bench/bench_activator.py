"""What the activator adds to a streaming request, against a direct request in the same run.

    python bench/bench_activator.py [--streams 200] [--tokens 40] [--rate 50] [--rounds 3] [--held 10000]
        [--arrivals burst|staggered] [--event-loop auto|uvloop|asyncio] [--pin] [--activators 1]

Three processes on loopback: a fake OpenAI upstream that streams `--tokens` SSE events per request at
`--rate` tokens/s (each event carries its send time, CLOCK_MONOTONIC, which every process shares), the
activator (`keda-llm activator`, a subprocess), and the load generator (a subprocess of its own), which
keeps `--streams` streams open at once, alternating rounds direct to the upstream and through the
activator. Reported: time to first byte p50/p99 and per-chunk delivery latency (send -> receive) p50/p99
for both paths, the difference (what the activator adds) and the ratio; the activator's CPU seconds per
request (from /proc); then a second activator with its model at zero holds `--held` requests and its
RSS is read (VmRSS) against its RSS idle (`--held 0` skips it). Prints a markdown table.

`--arrivals burst` (the default) starts every stream of a round at once, so the upstream's tokens of all
streams fall due on the same ticks and each hop relays `--streams` chunks back to back: the tail is that
burst. `staggered` spreads stream j's start over one stream's duration (j / streams of it) and has each
stream make `--per-stream` requests back to back, so the chunks arrive spread out, as independent users'
would. `--event-loop` is passed to the activator. `--activators K` starts K activators with the same
config, as K pods of one Deployment, and the load generator spreads its streams over them round-robin,
as a Service spreads connections (default 1). `--pin` pins every process to a CPU of its own where there
are K + 2 (upstream 0, activators 1..K, load K + 1), else the activators to CPU 1 and the other two to
CPU 0. The machine's load average (1 min, at the end of the proxied rounds) and the CPU other processes
used meanwhile (cores, from /proc/stat less the benchmark's own) are reported beside the figures: on a
shared machine they say how much of a core the activator could get. Where the kernel groups processes
by session for the CPU (`/proc/sys/kernel/sched_autogroup_enabled` = 1), all of them share one
session's fair share however they are pinned or niced; `--own-group` starts each in a session of
its own, as each would have a cgroup of its own as a pod (it takes a larger share of a shared machine).
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

async def load(urls: list[str], streams: int, rounds: int, stagger: float = 0.0,
               per_stream: int = 1, part: tuple[int, int] = (0, 1)) -> dict[str, Any]:
    """Each entry of `urls` is one path: its addresses joined by `+` share the streams round-robin.

    `part` = (k, L): this is load generator k of L, running streams k, k + L, ... of `streams`; with
    L > 1 each round starts when the parent says so on stdin ("go PID,PID,...": the benchmark's
    processes), after this one has said "ready" on stdout, so the L generators' rounds line up."""
    import aiohttp
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    out: dict[str, Any] = {u: {"ttfb": [], "chunk": [], "requests": 0, "errors": 0, "cpu": [0.0, 0.0],
                               "loadavg": 0.0, "others": 0.0} for u in urls}
    pids = [int(x) for x in os.environ.get("BENCH_PIDS", "").split(",") if x]  # ours: not "others"
    k, parts = part
    mine = range(k, streams, parts)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one(url: str, base: str) -> None:
            rec = out[url]
            t0 = time.monotonic()
            try:
                async with s.post(base + "/v1/chat/completions", data=body,
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

        async def stream(url: str, j: int) -> None:
            await asyncio.sleep(j / streams * stagger)
            bases = url.split("+")
            for _ in range(per_stream):
                await one(url, bases[j % len(bases)])

        for _ in range(rounds):
            for url in urls:  # alternate the two paths round by round: same machine, same minute
                if parts > 1:
                    print("ready", flush=True)
                    go = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                    pids = [int(x) for x in go.split()[1].split(",") if int(x) != os.getpid()]
                busy0, ours0, t0 = machine_busy(), sum(proc_stat(p)[0] for p in [os.getpid(), *pids]), time.monotonic()
                await asyncio.gather(*(stream(url, j) for j in mine))
                ours1, busy1, t1 = sum(proc_stat(p)[0] for p in [os.getpid(), *pids]), machine_busy(), time.monotonic()
                out[url]["cpu"][0] += ours1 - ours0
                out[url]["others"] += (busy1 - busy0) - (ours1 - ours0)
                out[url]["cpu"][1] += t1 - t0
                out[url]["loadavg"] = float(Path("/proc/loadavg").read_text().split()[0])
    return out


def machine_busy() -> float:
    """CPU seconds all processes have used (all cores; /proc/stat, less idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


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


def start_activator(cfg: str, admin: int, event_loop: str = "auto", own_group: bool = False) -> subprocess.Popen[bytes]:
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115 - the child reads it
    f.write(cfg)
    f.close()
    p = subprocess.Popen([sys.executable, "-m", "keda_llm.cli", "activator", "--config", f.name,
                          "--admin-listen", f"127.0.0.1:{admin}", "--log-level", "WARNING",
                          "--event-loop", event_loop], cwd=tempfile.gettempdir(),  # not a checkout's keda_llm/
                         start_new_session=own_group)
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


def run_delay(pid: int) -> tuple[float, int]:
    """(seconds a process's main thread has waited on a run queue, times it was scheduled)."""
    _, wait_ns, slices = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(wait_ns) / 1e9, int(slices)


def pin(pids: dict[str, int]) -> dict[str, set[int]]:
    """Pin upstream, each activator (`activator`, `activator2`, ...) and the load generator to CPUs of
    their own where there are enough, else the activators to CPU 1 and the other two to CPU 0 (one CPU:
    nothing to do)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {}
    acts = [role for role in pids if role.startswith("activator")]
    loads = [role for role in pids if role.startswith("load")]
    if len(cpus) >= len(acts) + len(loads) + 1:
        plan = {"upstream": {cpus[0]}, **{r: {cpus[1 + k]} for k, r in enumerate(acts)},
                **{r: {cpus[1 + len(acts) + k]} for k, r in enumerate(loads)}}
    else:
        plan = {"upstream": {cpus[0]}, **{r: {cpus[1]} for r in acts}, **{r: {cpus[0]} for r in loads}}
    for role, pid in pids.items():
        os.sched_setaffinity(pid, plan[role])
    return plan


def run_loaders(loaders: list[subprocess.Popen[str]], rounds: int, pids: str) -> dict[str, Any]:
    """Drive the load generators' rounds in step (each says "ready", all are told "go" at once) and merge
    their results: latencies and counts from all, CPU and load from the first (they share the rounds)."""
    if len(loaders) > 1:
        for _ in range(rounds):
            for p in loaders:
                assert p.stdout is not None
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit("a load generator failed")
            for p in loaders:
                assert p.stdin is not None
                p.stdin.write(f"go {pids}\n")
                p.stdin.flush()
    results = []
    for p in loaders:
        stdout, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"load generator failed ({p.returncode})")
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    merged: dict[str, Any] = results[0]
    for other in results[1:]:
        for path, rec in other.items():
            for key in ("ttfb", "chunk"):
                merged[path][key] += rec[key]
            for key in ("requests", "errors"):
                merged[path][key] += rec[key]
    return merged


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
    ap.add_argument("--held", type=int, default=10_000, help="requests held at zero for the RSS (0: skip)")
    ap.add_argument("--arrivals", choices=["burst", "staggered"], default="burst")
    ap.add_argument("--per-stream", type=int, default=3, help="requests per stream per round (staggered)")
    ap.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                    help="the activator's (keda-llm activator --event-loop)")
    ap.add_argument("--pin", action="store_true", help="pin every process to a CPU (see above)")
    ap.add_argument("--activators", type=int, default=1, help="activator processes, as pods behind a Service")
    ap.add_argument("--loaders", type=int, default=1,
                    help="load generator processes sharing the streams, rounds in step (see above)")
    ap.add_argument("--part", default="0/1", help=argparse.SUPPRESS)
    ap.add_argument("--own-group", action="store_true",
                    help="each process in a session, so a scheduling autogroup, of its own (see above)")
    ap.add_argument("--out", default="", help="also append the table to this markdown file")
    ap.add_argument("--stagger", type=float, default=0.0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--urls", default="")
    ap.add_argument("--admin", default="")
    a = ap.parse_args()
    if a.role == "upstream":
        asyncio.run(upstream(a.port, a.tokens, a.rate))
        return 0
    if a.role == "load":
        k, parts = (int(x) for x in a.part.split("/"))
        print(json.dumps(asyncio.run(load(a.urls.split(","), a.streams, a.rounds, a.stagger, a.per_stream,
                                          (k, parts)))))
        return 0
    if a.role == "hold":
        asyncio.run(hold(a.urls, a.held, a.admin))
        return 0

    me = [sys.executable, str(Path(__file__).resolve())]
    up_port = free_port()
    up = subprocess.Popen([*me, "--role", "upstream", "--port", str(up_port), "--tokens", str(a.tokens),
                           "--rate", str(a.rate)], start_new_session=a.own_group)
    procs: list[subprocess.Popen[Any]] = [up]
    try:
        wait_http(f"http://127.0.0.1:{up_port}/health")
        if a.activators < 1:
            raise SystemExit("--activators: at least 1")
        acts: list[subprocess.Popen[bytes]] = []
        act_ports: list[int] = []
        for _ in range(a.activators):
            act_port, admin_port = free_port(), free_port()
            acts.append(start_activator(
                f"listen: 127.0.0.1:{act_port}\nmodels:\n  - name: m\n"
                f"    endpoints: [http://127.0.0.1:{up_port}]\n",
                admin_port, a.event_loop, a.own_group))
            procs.append(acts[-1])
            act_ports.append(act_port)
            wait_http(f"http://127.0.0.1:{admin_port}/healthz")
        time.sleep(1.5)  # the first probe has found the endpoint ready
        direct = f"http://127.0.0.1:{up_port}"
        via = "+".join(f"http://127.0.0.1:{p}" for p in act_ports)
        stagger = a.tokens / a.rate if a.arrivals == "staggered" else 0.0
        per_stream = a.per_stream if a.arrivals == "staggered" else 1
        cpu0 = sum(proc_stat(p.pid)[0] for p in acts)
        wait0 = [run_delay(p.pid) for p in acts]
        if a.loaders < 1:
            raise SystemExit("--loaders: at least 1")
        ours = ",".join(str(p.pid) for p in [up, *acts])
        loaders = [subprocess.Popen([*me, "--role", "load", "--urls", f"{direct},{via}", "--streams", str(a.streams),
                                     "--rounds", str(a.rounds), "--stagger", str(stagger),
                                     "--per-stream", str(per_stream), "--part", f"{k}/{a.loaders}"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "BENCH_PIDS": ours}, start_new_session=a.own_group)
                   for k in range(a.loaders)]
        procs.extend(loaders)
        roles = {"upstream": up.pid, **{("activator" if k == 0 else f"activator{k + 1}"): p.pid
                                         for k, p in enumerate(acts)},
                 **{("load" if k == 0 else f"load{k + 1}"): p.pid for k, p in enumerate(loaders)}}
        plan = pin(roles) if a.pin else {}
        out = run_loaders(loaders, 2 * a.rounds, ",".join([ours, *(str(p.pid) for p in loaders)]))
        cpu1 = sum(proc_stat(p.pid)[0] for p in acts)
        wait1 = [run_delay(p.pid) for p in acts]
        pairs = list(zip(wait0, wait1, strict=True))
        waits = (sum(w1[0] - w0[0] for w0, w1 in pairs), sum(w1[1] - w0[1] for w0, w1 in pairs))
        d, v = out[direct], out[via]
        # the activator's CPU in the direct rounds is its probes only (idle): all of it is charged here
        cpu_per_req_ms = (cpu1 - cpu0) / max(1, v["requests"]) * 1000
        if not a.held:
            report(a, d, v, cpu_per_req_ms, plan, waits, None)
            return 0

        # 10,000 held: a second activator whose model is at zero (its endpoint refuses connections)
        admin2, act2_port = free_port(), free_port()
        held_cfg = (f"listen: 127.0.0.1:{act2_port}\nmax_held: {a.held * 2}\nmax_wait: 10m\n"
                    f"models:\n  - name: m\n    endpoints: [http://127.0.0.1:{free_port()}]\n")
        act2 = start_activator(held_cfg, admin2, a.event_loop)
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

    report(a, d, v, cpu_per_req_ms, plan, waits, (held, rss_held, rss_idle))
    return 0


def report(a: argparse.Namespace, d: dict[str, Any], v: dict[str, Any], cpu_per_req_ms: float,
           plan: dict[str, set[int]], waits: tuple[float, int], held: tuple[float, int, int] | None) -> None:
    """Print the run's table (and append it, under the command line and the time, to --out)."""
    lines: list[str] = []
    say = lines.append
    ms = 1000.0
    rows = [("TTFB", d["ttfb"], v["ttfb"]), ("per chunk (send -> receive)", d["chunk"], v["chunk"])]
    chunks_s = a.streams * a.rate
    say(f"\n{a.streams} concurrent streams ({a.arrivals}) x {a.rounds} rounds per path, {a.tokens} tokens at "
        f"{a.rate:g} tok/s ({chunks_s:,.0f} chunks/s); {a.activators} activator(s), event loop {a.event_loop}; "
        f"pinned {({k: sorted(c) for k, c in plan.items()} if plan else 'no')}; "
        f"requests: direct {d['requests']} ({d['errors']} errors), "
        f"activator {v['requests']} ({v['errors']} errors)")
    say(f"load average (1 min) at the end of the proxied rounds {v['loadavg']:.2f}; CPU of other processes "
        f"meanwhile {v['others'] / max(1e-9, v['cpu'][1]):.2f} cores (direct rounds "
        f"{d['others'] / max(1e-9, d['cpu'][1]):.2f}), of {os.cpu_count()}; the benchmark's processes "
        f"{v['cpu'][0] / max(1e-9, v['cpu'][1]):.2f} cores (direct rounds "
        f"{d['cpu'][0] / max(1e-9, d['cpu'][1]):.2f})\n")
    say("| measure | direct p50 | direct p99 | activator p50 | activator p99 | added at p99 | ratio p99 |")
    say("|---|---|---|---|---|---|---|")
    for name, dx, vx in rows:
        dp99, vp99 = pct(dx, 99), pct(vx, 99)
        say(f"| {name} | {pct(dx, 50) * ms:.2f} ms | {dp99 * ms:.2f} ms | {pct(vx, 50) * ms:.2f} ms | "
            f"{vp99 * ms:.2f} ms | {(vp99 - dp99) * ms:+.2f} ms | {vp99 / dp99:.2f}x |")
    per_chunk_us = cpu_per_req_ms / a.tokens * 1000
    say(f"\nactivator CPU per streamed request: {cpu_per_req_ms:.2f} ms ({a.tokens} chunks: "
        f"{per_chunk_us:.0f} us per chunk with the request's own cost spread over them; "
        f"x {chunks_s:,.0f} chunks/s = {per_chunk_us * chunks_s / 1e6:.2f} of a core"
        f"{f', over {a.activators} activators' if a.activators > 1 else ''})")
    who = "activators" if a.activators > 1 else "activator"
    say(f"{who} waited for a CPU {waits[0] / max(1, waits[1]) * ms:.2f} ms on average each of the "
        f"{waits[1]:,} times it was scheduled, {waits[0]:.2f} s in all over the run (/proc/PID/schedstat)")
    if held is not None:
        n, rss_held, rss_idle = held
        say(f"RSS with {n:.0f} requests held: {rss_held / 2**20:.0f} MiB (idle {rss_idle / 2**20:.0f} MiB, "
            f"{(rss_held - rss_idle) / max(1, n):.0f} B per held request)")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        argv = sys.argv[1:]
        args = " ".join(x for k, x in enumerate(argv) if not x.startswith("--out") and argv[k - 1] != "--out")
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with open(a.out, "a", encoding="utf-8") as fh:
            fh.write(f"\n## `bench_activator.py {args}` ({stamp}, Python {sys.version.split()[0]})\n{text}")


if __name__ == "__main__":
    sys.exit(main())
