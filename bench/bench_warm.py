"""Cold against warmed: reading a multi-GB weights file after POST /v1/warm put it in the page cache.

    python bench/bench_warm.py [--gib 4] [--rounds 3] [--dir DIR]

Writes a file of random bytes on the disk under --dir (default: a temporary folder beside the
repository, not tmpfs), then per round: evict it from the page cache (fsync + POSIX_FADV_DONTNEED),
time a plain sequential read (what a model loader does: cold), evict again, warm it through the
exporter's own reader (exporter/warm.py, as POST /v1/warm runs it), then time the plain read again
(warmed). Reports wall seconds and GiB/s for each, and the ratio. The pod's loader would see the
warmed figure when the node's free memory holds the file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from keda_llm.exporter.warm import read_into_cache

GIB = 1024**3
CHUNK = 8 * 1024 * 1024


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def plain_read(path: Path) -> float:
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(view):
            pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=4.0, help="file size in GiB (default 4)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--dir", default=str(Path(__file__).resolve().parents[1] / "build"),
                    help="where to write the file (a disk, not tmpfs)")
    args = ap.parse_args()
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    size = int(args.gib * GIB)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "model.safetensors"
        block = os.urandom(CHUNK)
        with open(path, "wb") as fh:
            for _ in range(size // CHUNK):
                fh.write(block)
        cold, warm_s, warmed = [], [], []
        for _ in range(args.rounds):
            evict(path)
            cold.append(plain_read(path))
            evict(path)
            t0 = time.perf_counter()
            read_into_cache(str(path), bytearray(CHUNK), lambda n: None)
            warm_s.append(time.perf_counter() - t0)
            warmed.append(plain_read(path))
        gib = size / GIB
        c, w, r = statistics.median(cold), statistics.median(warmed), statistics.median(warm_s)
        print(f"file {gib:.1f} GiB, {args.rounds} rounds (median)")
        print(f"| read | seconds | GiB/s |\n|---|---|---|\n| cold (evicted) | {c:.2f} | {gib / c:.2f} |\n"
              f"| the warm itself (exporter reader) | {r:.2f} | {gib / r:.2f} |\n"
              f"| after the warm | {w:.2f} | {gib / w:.2f} |")
        print(f"warmed read is {c / w:.1f}x faster than cold")


if __name__ == "__main__":
    main()
