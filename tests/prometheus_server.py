"""Test fixtures: loopback HTTP servers that serve exporter-format bodies, and a REAL Prometheus server.

`prometheus_factory` starts the `prometheus` binary (Debian/Ubuntu package `prometheus`; .ci/run
installs it) on 127.0.0.1 with its TSDB in a temp dir and a config that scrapes the bodies we serve.
Without the binary the test fails under CI=true (a skipped real-Prometheus test would hide a broken
source) and is skipped elsewhere.

Use from a test module (pytest puts tests/ on sys.path):
    from prometheus_server import BodyServer, Job, prometheus_servers
    @pytest.fixture
    def prometheus_factory(tmp_path):
        with prometheus_servers(tmp_path) as start:
            yield start
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from httpstub import HttpStub, Response, free_port

START_TIMEOUT_S = 60.0


class BodyServer:
    """An HTTP/1.0 server on 127.0.0.1:<free port> answering every GET with the current (status, body).

    `set(...)` changes the answer between requests; `requests` counts GETs served, `paths` their targets.
    """

    def __init__(self, body: str | bytes = "", status: int = 200, content_type: str = "text/plain; version=0.0.4"):
        self.set(body, status, content_type)
        self._stub = HttpStub(lambda _: self._answer, protocol="HTTP/1.0")
        self.port = self._stub.port
        self.address = self._stub.address
        self.url = f"{self._stub.url}/metrics"

    @property
    def requests(self) -> int:
        return len(self._stub.requests)

    @property
    def paths(self) -> list[str]:
        return [r.target for r in self._stub.requests]

    def set(self, body: str | bytes, status: int = 200, content_type: str = "text/plain; version=0.0.4") -> None:
        self._answer = Response(status, body.encode() if isinstance(body, str) else body, content_type)

    def close(self) -> None:
        self._stub.close()


def json_body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def refused_address() -> str:
    """host:port where nothing listens (bound then closed: connecting is refused)."""
    return f"127.0.0.1:{free_port()}"


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        message = (
            "the `prometheus` server binary is not on PATH: install it (Debian/Ubuntu: apt-get install prometheus; "
            "or a release from https://prometheus.io/download/) to run the real-Prometheus source tests"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class Job:
    """One scrape job: targets (host:port), whether exporter labels win, extra target labels."""

    name: str
    targets: Sequence[str]
    honor_labels: bool = True
    labels: Mapping[str, str] | None = None


@dataclass
class PrometheusServer:
    url: str

    def query(self, promql: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}") as r:
            doc: dict[str, Any] = json.load(r)
            return doc

    def wait_for(self, promql: str, accept: Callable[[list[Any]], bool], timeout_s: float = 30.0) -> list[Any]:
        """Poll `promql` until `accept(result)`; fail naming the last result. Waits on a condition, not a time."""
        deadline = time.monotonic() + timeout_s
        result: list[Any] = []
        while time.monotonic() < deadline:
            result = self.query(promql)["data"]["result"]
            if accept(result):
                return result
            time.sleep(0.2)
        pytest.fail(f"Prometheus never answered {promql!r} acceptably within {timeout_s}s; last: {result}")


def _config(jobs: Sequence[Job], scrape_interval: str, rule_files: Sequence[Path] = ()) -> str:
    lines = ["global:", f"  scrape_interval: {scrape_interval}", f"  scrape_timeout: {scrape_interval}",
             f"  evaluation_interval: {scrape_interval}"]
    if rule_files:
        lines += ["rule_files:", *(f"  - {json.dumps(str(p))}" for p in rule_files)]
    lines.append("scrape_configs:")
    for job in jobs:
        lines += [f"  - job_name: {job.name}", f"    honor_labels: {str(job.honor_labels).lower()}",
                  "    static_configs:", f"      - targets: {json.dumps(list(job.targets))}"]
        if job.labels:
            lines.append(f"        labels: {json.dumps(dict(job.labels))}")
    return "\n".join(lines) + "\n"


@contextmanager
def running_prometheus(workdir: Path, jobs: Sequence[Job], scrape_interval: str = "1s",
                       rule_files: Sequence[Path] = ()) -> Iterator[PrometheusServer]:
    """A real Prometheus on 127.0.0.1 scraping `jobs` (and evaluating `rule_files` at the scrape interval);
    stopped (and its TSDB removed with workdir) on exit."""
    binary = prometheus_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(_config(jobs, scrape_interval, rule_files))
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    server = PrometheusServer(url=f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}: {(workdir / 'prometheus.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus not ready in {START_TIMEOUT_S}s")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def backfilled_prometheus(workdir: Path, openmetrics: str) -> Iterator[PrometheusServer]:
    """A real Prometheus whose history is `openmetrics` (samples with timestamps, `# EOF` last), turned into TSDB
    blocks by `promtool tsdb create-blocks-from openmetrics` (Prometheus' own backfill tool), so a test of hours or
    days of history waits for none of it. It scrapes an empty body: everything it holds is in the blocks. Skipped
    (or failed under CI) without the binaries; the samples must be older than about an hour's head block."""
    prometheus_binary()
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Prometheus' own backfill tool, packaged with prometheus) is not on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "data.om").write_text(openmetrics)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "data.om"),
                    str(workdir / "tsdb")], check=True, capture_output=True)
    idle = BodyServer("")
    try:
        with running_prometheus(workdir, [Job("idle", [idle.address])]) as prom:
            yield prom
    finally:
        idle.close()


@contextmanager
def prometheus_servers(tmp_path: Path) -> Iterator[Callable[[Sequence[Job]], PrometheusServer]]:
    """`start(jobs) -> PrometheusServer`; every server started is stopped on exit."""
    started: list[Any] = []

    def start(jobs: Sequence[Job]) -> PrometheusServer:
        cm = running_prometheus(tmp_path / f"prometheus-{len(started)}", jobs)
        server = cm.__enter__()
        started.append(cm)
        return server

    try:
        yield start
    finally:
        for cm in reversed(started):
            cm.__exit__(None, None, None)


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[[Sequence[Job]], PrometheusServer]]:
    """The same as a fixture, for a conftest that registers this module as a plugin."""
    with prometheus_servers(tmp_path) as start:
        yield start
