"""Fuzz the exporter's inputs with a fast plain generator: engine bodies and the exporter config.

    python scripts/fuzz_exporter.py --count 1000000 [--seed 1]     # the long opt-in run

Bodies are real engine outputs (tests/fixtures/engines) cut to a few lines and mutated (characters
inserted, deleted or swapped, numbers turned into NaN, infinities or 400 digits, lines repeated, labels
broken, the text truncated), then normalized as the collector does, detected and with every engine
forced. The promise checked: only ScrapeError escapes, and whatever comes back carries finite numbers.
Configs are random maps of the documented keys: only ConfigError escapes. tests/exporter/test_fuzz.py
runs the same generator on a few thousand inputs in every CI run.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from keda_llm.exporter.config import ConfigError, parse_config
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import EngineMetrics, Target

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "engines"
ENGINES = (None, "vllm", "sglang", "tgi", "trtllm", "llamacpp")
_NOISE = '{}"=,\\\n# \t.-+eE0123456789_:aZ' + "\u00e9\u2028\x00"
_NUMBERS = ("NaN", "+Inf", "-Inf", "9" * 400, "-1", "1e309", "0x1F", "1_0", "", "1.0.0")


def fixture_lines() -> list[list[str]]:
    return [p.read_text().splitlines() for p in sorted(FIXTURES.glob("*.prom"))]


def _mutate(text: str, rng: random.Random) -> str:
    pick = rng.randrange(7)
    if not text:
        return rng.choice(_NOISE)
    i = rng.randrange(len(text))
    if pick == 0:
        return text[:i] + rng.choice(_NOISE) + text[i:]
    if pick == 1:
        return text[:i] + text[i + 1:]
    if pick == 2:
        j = rng.randrange(len(text))
        chars = list(text)
        chars[i], chars[j] = chars[j], chars[i]
        return "".join(chars)
    if pick == 3:  # a value turned odd
        lines = text.split("\n")
        k = rng.randrange(len(lines))
        head, _, _ = lines[k].rpartition(" ")
        lines[k] = f"{head} {rng.choice(_NUMBERS)}" if head else lines[k]
        return "\n".join(lines)
    if pick == 4:  # a line repeated (duplicate series)
        lines = text.split("\n")
        k = rng.randrange(len(lines))
        return "\n".join([*lines[:k + 1], lines[k], *lines[k + 1:]])
    if pick == 5:
        return text[:i]  # truncated mid-line
    return text.replace('"', "", 1) if rng.random() < 0.5 else text.replace("}", "", 1)


def bodies(rng: random.Random, sources: list[list[str]]) -> Iterator[str]:
    """Endless mutated excerpts of real bodies (a few lines each: many inputs per second)."""
    while True:
        lines = rng.choice(sources)
        start = rng.randrange(len(lines))
        text = "\n".join(lines[start:start + rng.randint(1, 60)])
        for _ in range(rng.randint(0, 4)):
            text = _mutate(text, rng)
        yield text


def check_body(body: str, engine: str | None) -> None:
    """Raises AssertionError on a broken promise; ScrapeError is the documented refusal."""
    target = Target(url="http://10.0.0.7:8000/metrics", namespace="ml", pod="p", model="m", engine=engine)
    try:
        out = normalize(body, target)
    except ScrapeError:
        return
    for metrics in out:
        assert isinstance(metrics, EngineMetrics), metrics
        for f in dataclasses.fields(metrics):
            value = getattr(metrics, f.name)
            if isinstance(value, float):
                assert math.isfinite(value), (f.name, value, body)


_CONFIG_KEYS = ("listen", "interval", "timeout", "max_body_bytes", "node_name", "targets", "kubernetes", "gpu")
_CONFIG_VALUES: tuple[object, ...] = ("", ":9400", "5s", "0s", "-1s", "9" * 400 + "h", "8MiB", "1e309", "NaN",
                                      0, -1, 2**70, 1.5, float("nan"), float("inf"), True, None, [], {}, "x" * 5000,
                                      [{"url": "http://a:1/metrics"}], [{"url": "ftp://x"}], [{"engine": "gpu"}],
                                      {"enabled": True, "refresh_interval": "0s"}, {"nvml": "yes"}, ["a", 1])


def configs(rng: random.Random) -> Iterator[dict[str, object]]:
    while True:
        yield {rng.choice(_CONFIG_KEYS): rng.choice(_CONFIG_VALUES) for _ in range(rng.randint(0, 5))}


def check_config(data: dict[str, object]) -> None:
    try:
        parse_config(data, {"NODE_NAME": "n"})
    except ConfigError:
        return


def run(count: int, seed: int, progress: Callable[[int], None] | None = None) -> tuple[int, list[str]]:
    """`count` inputs (nine bodies to one config); returns (inputs run, failures as text)."""
    rng = random.Random(seed)
    source = bodies(rng, fixture_lines())
    cfgs = configs(rng)
    failures: list[str] = []
    for n in range(count):
        if n % 10 == 9:
            data = next(cfgs)
            try:
                check_config(data)
            except Exception as err:
                failures.append(f"config {data!r}: {type(err).__name__}: {err}")
        else:
            body = next(source)
            engine = ENGINES[n % len(ENGINES)]
            try:
                check_body(body, engine)
            except Exception as err:
                failures.append(f"body (engine {engine}) {body[:300]!r}: {type(err).__name__}: {err}")
        if progress is not None and n % 100_000 == 0:
            progress(n)
    return count, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="inputs to run (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    args = ap.parse_args(argv)
    t0 = time.process_time()
    ran, failures = run(args.count, args.seed, lambda n: print(f"{n:,} inputs", file=sys.stderr, flush=True))
    for failure in failures[:20]:
        print(failure)
    print(f"{ran:,} inputs (seed {args.seed}), {len(failures)} failures, {time.process_time() - t0:.0f} CPU s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
