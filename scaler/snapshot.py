"""The per-pod snapshot of the long tiers (`--history-dir`): how a scaler without Prometheus keeps days
of history across a restart.

Written every few minutes and at shutdown to `<dir>/long-history.v1.bin` by write-then-rename (a
reader sees the old file or the new one, never half of one). Read back once at start; each model's
minutes are merged into its long tier when the model is first seen (live minutes win). Each pod keeps
its own file, so two pods started at different times may hold different histories: only a Prometheus
(scaler/backfill.py) gives every pod the same one.

Format, version 1 (little-endian), written front to back in one pass (a model at a time, so saving
1,000 models never holds a second copy of their history in memory):
    16 bytes  magic b"KEDA-LLM-LONGHIS"
     4 bytes  format version (uint32) = 1
              per entry: n x 3 uint16, the packed minute words, oldest minute (head - n + 1) first
     H bytes  trailer, UTF-8 JSON: {"fields": [...], "lo": LO, "hi": HI, "entries": [{"source", "namespace",
              "model", "head" (newest minute number), "n" (minutes)}, ...]} in the order of the words
     4 bytes  H (uint32)
     4 bytes  CRC-32 of everything before it
Anything else (another magic or version, a bad CRC, sizes that do not add up, other fields or
encoding bounds) is refused as a whole: a clear log line and an empty history, never a crash.
The file is bounded: at most `max_bytes` (default 256 MiB); entries come most recently seen first and
those past the bound are left out.
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from keda_llm.scaler.longhistory import HI, LO, LONG_FIELDS

log = logging.getLogger(__name__)

MAGIC = b"KEDA-LLM-LONGHIS"
VERSION = 1
FILENAME = "long-history.v1.bin"
TEMPORARY_PREFIX = ".long-history-"  # a save's temporary file, renamed to FILENAME once whole
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
_U32 = struct.Struct("<I")

EntryKey = tuple[str, str, str]  # (source, namespace, model)


class SnapshotError(Exception):
    """The file is not a snapshot this version can read; the message says what is wrong."""


@dataclass(frozen=True)
class Entry:
    """One model's long tier: its newest minute and the words of the `len(words)` minutes up to it."""

    source: str
    namespace: str
    model: str
    head: int
    words: npt.NDArray[np.uint16]  # (n, 3)

    @property
    def minutes(self) -> npt.NDArray[np.int64]:
        return np.arange(self.head - len(self.words) + 1, self.head + 1, dtype=np.int64)


def write_to(f: BinaryIO, entries: Iterable[Entry], max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Write the snapshot to `f`, entries in the order given until `max_bytes` would be passed (the rest are
    left out, and logged). Returns how many entries were written."""
    crc = 0

    def put(data: bytes) -> None:
        nonlocal crc
        f.write(data)
        crc = zlib.crc32(data, crc)

    put(MAGIC + _U32.pack(VERSION))
    size = len(MAGIC) + 4 + 8 + 256
    meta: list[dict[str, object]] = []
    left_out = 0
    for e in entries:
        cost = e.words.size * 2 + 120 + len(e.model) + len(e.namespace) + len(e.source)
        if left_out or size + cost > max_bytes:
            left_out += 1
            continue
        put(np.ascontiguousarray(e.words, dtype="<u2").tobytes())
        meta.append({"source": e.source, "namespace": e.namespace, "model": e.model, "head": int(e.head),
                     "n": len(e.words)})
        size += cost
    if left_out:
        log.warning("long history snapshot: %d of %d models left out to stay under %d bytes", left_out,
                    left_out + len(meta), max_bytes)
    trailer = json.dumps({"fields": list(LONG_FIELDS), "lo": LO, "hi": HI, "entries": meta}).encode()
    put(trailer + _U32.pack(len(trailer)))
    f.write(_U32.pack(crc))
    return len(meta)


def encode_file(entries: Iterable[Entry], max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes (`write_to` into memory)."""
    buf = io.BytesIO()
    write_to(buf, entries, max_bytes)
    return buf.getvalue()


def decode_file(data: bytes) -> list[Entry]:
    """The entries of a snapshot's bytes; SnapshotError naming what is wrong."""
    if len(data) < len(MAGIC) + 12 or data[:len(MAGIC)] != MAGIC:
        raise SnapshotError("not a keda-llm long history snapshot (bad magic)")
    (version,) = _U32.unpack_from(data, len(MAGIC))
    if version != VERSION:
        raise SnapshotError(f"format version {version}, this scaler reads {VERSION}")
    (crc,) = _U32.unpack_from(data, len(data) - 4)
    if zlib.crc32(data[:-4]) != crc:
        raise SnapshotError("checksum mismatch (truncated or corrupt)")
    (tlen,) = _U32.unpack_from(data, len(data) - 8)
    words_end = len(data) - 8 - tlen
    if words_end < len(MAGIC) + 4:
        raise SnapshotError("sizes in the file do not add up")
    try:
        trailer = json.loads(data[words_end:len(data) - 8])
        if trailer["fields"] != list(LONG_FIELDS) or trailer["lo"] != LO or trailer["hi"] != HI:
            raise SnapshotError(f"written with other series or encoding bounds: {trailer['fields']}, "
                                f"lo {trailer['lo']}, hi {trailer['hi']}")
        specs = [(str(e["source"]), str(e["namespace"]), str(e["model"]), int(e["head"]), int(e["n"]))
                 for e in trailer["entries"]]
    except (ValueError, KeyError, TypeError) as err:
        raise SnapshotError(f"bad trailer: {err}") from None
    pos = len(MAGIC) + 4
    if pos + sum(n * 6 for *_, n in specs) != words_end or any(n <= 0 for *_, n in specs):
        raise SnapshotError("sizes in the trailer do not match the file")
    out = []
    for source, namespace, model, head, n in specs:
        words = np.frombuffer(data, dtype="<u2", count=n * 3, offset=pos).reshape(n, 3).astype(np.uint16)
        pos += n * 6
        out.append(Entry(source, namespace, model, head, words))
    return out


def save(directory: Path, entries: Iterable[Entry], max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """Write the snapshot atomically (temp file in the same directory, fsync, rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FILENAME
    fd, tmp = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write_to(f, entries, max_bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


#: A temporary file of a save older than this is a save that was killed (SIGKILL, OOM) before its rename; a
#: younger one may be another pod's save in progress on a shared folder.
STALE_TEMPORARY_S = 3600.0


def sweep_temporaries(directory: Path, now: float, older_than_s: float = STALE_TEMPORARY_S) -> int:
    """Remove the temporary files killed saves left (up to the snapshot's size each: left, they filled the
    volume one kill at a time); returns how many."""
    removed = 0
    try:
        candidates = list(directory.glob(TEMPORARY_PREFIX + "*"))
    except OSError:
        return 0
    for path in candidates:
        try:
            if now - path.stat().st_mtime > older_than_s:
                path.unlink()
                removed += 1
        except OSError:
            continue  # gone meanwhile, or not ours to remove: the next start tries again
    if removed:
        log.info("long history: %d temporary file(s) of interrupted saves removed from %s", removed, directory)
    return removed


def load(directory: Path) -> dict[EntryKey, Entry]:
    """The snapshot in `directory` by (source, namespace, model); {} when there is none, or when it cannot be
    read (logged once, naming the file and why: the pod starts with an empty long history)."""
    path = directory / FILENAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as err:
        log.warning("long history snapshot %s unreadable (%s): starting with an empty long history", path, err)
        return {}
    try:
        entries = decode_file(data)
    except SnapshotError as err:
        log.warning("long history snapshot %s ignored: %s; starting with an empty long history", path, err)
        return {}
    log.info("long history snapshot %s: %d models", path, len(entries))
    return {(e.source, e.namespace, e.model): e for e in entries}
