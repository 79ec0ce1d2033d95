"""POST /v1/warm (exporter/warm.py) over real HTTP: what it reads, and everything it refuses."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keda_llm.exporter.config import ConfigError, parse_config
from keda_llm.exporter.server import MetricsServer, create_server
from keda_llm.exporter.warm import WarmConfig, Warmer, WarmError, plan, read_into_cache

TOKEN = "s3cret-warm-token"


class _Source:
    def exposition(self, gzipped: bool = False) -> bytes:
        return b""

    def healthy(self) -> bool:
        return True


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """models/llama/{a,b}.safetensors inside; secret/ outside; links of every kind."""
    models = tmp_path / "models"
    (models / "llama").mkdir(parents=True)
    (models / "llama" / "a.safetensors").write_bytes(os.urandom(300_000))
    (models / "llama" / "b.safetensors").write_bytes(os.urandom(200_000))
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("do not read")
    (models / "escape-file").symlink_to(tmp_path / "secret" / "key")
    (models / "escape-dir").symlink_to(tmp_path / "secret")
    (models / "inner-link").symlink_to(models / "llama")  # a link that stays inside is fine
    (models / "mixed").mkdir()
    (models / "mixed" / "ok.bin").write_bytes(b"x" * 2048)
    (models / "mixed" / "sneaky").symlink_to(tmp_path / "secret" / "key")
    (tmp_path / "token").write_text(TOKEN + "\n")
    return tmp_path


def _warmer(tree: Path, **kw: Any) -> Warmer:
    return Warmer(WarmConfig(directories=(str(tree / "models"),), token_file=str(tree / "token"), **kw))


# ---- the path rules ----

def test_plan_lists_the_files_below_a_folder_with_their_sizes(tree: Path) -> None:
    files = plan(str(tree / "models" / "llama"), (str(tree / "models"),))
    assert [(Path(p).name, size) for p, size in files] == [("a.safetensors", 300_000), ("b.safetensors", 200_000)]
    assert plan(str(tree / "models" / "inner-link"), (str(tree / "models"),)) == files


@pytest.mark.parametrize(("requested", "status"), [
    ("models/llama", 400),  # relative
    ("/models\x00/x", 400),  # NUL
    ("{models}/llama/../../secret/key", 403),  # '..' even when it would resolve inside
    ("{models}/llama/..", 403),
    ("{tmp}/secret/key", 403),  # outside
    ("{models}/escape-file", 403),  # a link leading out
    ("{models}/escape-dir", 403),
    ("{models}/escape-dir/key", 403),
    ("{models}/mixed", 403),  # a link leading out anywhere below
    ("{models}/nothing-here", 404),
    ("/", 403),
])
def test_plan_refuses_every_way_out(tree: Path, requested: str, status: int) -> None:
    path = requested.format(models=tree / "models", tmp=tree)
    with pytest.raises(WarmError) as err:
        plan(path, (str(tree / "models"),))
    assert err.value.status == status


def test_a_sibling_folder_sharing_the_prefix_is_outside(tree: Path) -> None:
    (tree / "models-other").mkdir()
    (tree / "models-other" / "w").write_bytes(b"w" * 1024)
    with pytest.raises(WarmError) as err:
        plan(str(tree / "models-other" / "w"), (str(tree / "models"),))
    assert err.value.status == 403


def test_reading_reuses_one_buffer_and_counts_every_byte(tree: Path) -> None:
    seen: list[int] = []
    buffer = bytearray(64 * 1024)
    assert read_into_cache(str(tree / "models" / "llama" / "a.safetensors"), buffer, seen.append) == 300_000
    assert sum(seen) == 300_000 and max(seen) <= len(buffer)


# ---- over HTTP ----

@pytest.fixture
def serve() -> Iterator[Callable[[Warmer | None], str]]:
    servers: list[MetricsServer] = []

    def start(warmer: Warmer | None) -> str:
        server, port = create_server(("127.0.0.1", 0), _Source(), warmer)
        server.start()
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop()


def _call(url: str, body: object = None, token: str | None = TOKEN, method: str = "POST",
          raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url + "/v1/warm", data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_an_authenticated_warm_reads_every_byte_and_reports_it(tree: Path, serve: Callable[[Warmer | None], str],
                                                             ) -> None:
    warmer = _warmer(tree)
    url = serve(warmer)
    status, job = _call(url, {"path": str(tree / "models" / "llama")})
    assert status == 202 and job["files"] == 2 and job["bytes"] == 500_000
    assert warmer.wait(10)
    status, listing = _call(url, method="GET")
    assert status == 200
    (done,) = listing["jobs"]
    assert done["state"] == "done" and done["bytes_read"] == 500_000
    assert warmer.bytes_read_total == 500_000


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x", TOKEN[:-1]])
def test_without_the_token_nothing_is_read_and_nothing_is_listed(tree: Path, serve: Callable[[Warmer | None], str],
                                                                 token: str | None) -> None:
    warmer = _warmer(tree)
    url = serve(warmer)
    assert _call(url, {"path": str(tree / "models" / "llama")}, token=token)[0] == 401
    assert _call(url, token=token, method="GET")[0] == 401
    assert warmer.bytes_read_total == 0 and warmer.jobs() == []


def test_refusals_over_http_name_the_reason(tree: Path, serve: Callable[[Warmer | None], str]) -> None:
    url = serve(_warmer(tree, max_bytes=400_000))
    assert _call(url, {"path": str(tree / "models" / "escape-file")})[0] == 403
    assert _call(url, {"path": str(tree / "models" / "llama" / ".." / ".." / "secret")})[0] == 403
    status, answer = _call(url, {"path": str(tree / "models" / "llama")})
    assert status == 413 and "max_bytes" in answer["error"]
    assert _call(url, {"nope": 1})[0] == 400
    assert _call(url, raw=b"{not json")[0] == 400
    assert _call(url, raw=b"x" * (70 * 1024))[0] == 413  # an oversized request body is not read


def test_past_max_concurrent_a_warm_is_refused_with_429(tree: Path, serve: Callable[[Warmer | None], str]) -> None:
    release = threading.Event()

    def slow_reader(path: str, buffer: bytearray, progress: Callable[[int], None]) -> int:
        release.wait(10)
        return read_into_cache(path, buffer, progress)

    warmer = Warmer(WarmConfig(directories=(str(tree / "models"),), token_file=str(tree / "token"),
                               max_concurrent=1), reader=slow_reader)
    url = serve(warmer)
    file = str(tree / "models" / "llama" / "a.safetensors")
    assert _call(url, {"path": file})[0] == 202
    assert _call(url, {"path": file})[0] == 429
    release.set()
    assert warmer.wait(10)
    assert _call(url, {"path": file})[0] == 202  # the slot is free again


def test_a_rotated_token_is_picked_up_without_a_restart(tree: Path, serve: Callable[[Warmer | None], str]) -> None:
    url = serve(_warmer(tree))
    file = str(tree / "models" / "mixed" / "ok.bin")
    assert _call(url, {"path": file})[0] == 202
    time.sleep(0.01)
    (tree / "token").write_text("rotated-token")
    os.utime(tree / "token", (time.time() + 5, time.time() + 5))  # a new mtime even on coarse clocks
    assert _call(url, {"path": file})[0] == 401
    assert _call(url, {"path": file}, token="rotated-token")[0] in (202, 429)


def test_not_configured_is_404_and_metrics_still_serve(serve: Callable[[Warmer | None], str]) -> None:
    url = serve(None)
    assert _call(url, {"path": "/models"})[0] == 404
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        assert resp.status == 200


# ---- config ----

def test_the_warm_block_parses_and_needs_a_token_file() -> None:
    cfg = parse_config({"warm": {"directories": ["/models"], "token_file": "/var/run/secrets/warm/token",
                                 "max_bytes": "2TiB", "max_concurrent": 4}})
    assert cfg.warm == WarmConfig(("/models",), "/var/run/secrets/warm/token", 2 * 1024**4, 4)
    assert not parse_config({}).warm.enabled
    for bad, key in (({"directories": ["/models"]}, "warm.token_file"),
                     ({"directories": ["models"], "token_file": "/t"}, "warm.directories"),
                     ({"directories": "/models", "token_file": "/t"}, "warm.directories"),
                     ({"directories": ["/m"], "token_file": "/t", "max_concurrent": 0}, "warm.max_concurrent"),
                     ({"directories": ["/m"], "token_file": "/t", "max_bytes": "lots"}, "warm.max_bytes"),
                     ({"unknown": 1}, "warm.unknown")):
        with pytest.raises(ConfigError) as err:
            parse_config({"warm": bad})
        assert err.value.key == key, bad
