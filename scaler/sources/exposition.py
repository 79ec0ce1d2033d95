"""Exporter text -> per-model Observations: the pure core of the `exporters` source.

The scaler reads a handful of exporters holding thousands of series each, every few seconds, so
this is a purpose-built reader, not a general one: it looks at each line's metric name first and
only splits labels for the dozen `llm_*` engine series a ReplicaSample needs (histogram buckets and
GPU series are skipped after a name check). Every line is still checked to be an exposition line,
so an HTML error page or a truncated body is refused as a whole with the line that was wrong,
the way Prometheus refuses a scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from keda_llm.common import vocabulary as v
from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.sources.errors import SourceError

#: The field of llm_replica_degraded: read per `reason` label, as "degraded:<reason>" (1 = active).
DEGRADED = "degraded"

#: metric name -> ReplicaSample field, for the engine series the scaler reads.
FIELD_OF: Mapping[str, str] = {
    "llm_requests_running": "running",
    "llm_requests_waiting": "waiting",
    "llm_requests_max_running": "max_running",
    "llm_kv_cache_usage_ratio": "kv_usage_ratio",
    "llm_kv_cache_capacity_tokens": "kv_capacity_tokens",
    "llm_prompt_tokens_total": "prompt_tokens_total",
    "llm_generation_tokens_total": "generation_tokens_total",
    "llm_requests_finished_total": "requests_finished_total",
    "llm_prefix_cache_queried_tokens_total": "prefix_queried_total",  # prompt tokens net of hits (pools.py)
    "llm_prefix_cache_hit_tokens_total": "prefix_hit_total",
    "llm_time_to_first_token_seconds_sum": "ttft_sum",  # histograms: _sum/_count only, buckets skipped
    "llm_time_to_first_token_seconds_count": "ttft_count",
    "llm_inter_token_latency_seconds_sum": "itl_sum",
    "llm_inter_token_latency_seconds_count": "itl_count",
    "llm_lora_adapters_running": "lora_running",
    "llm_lora_adapters_waiting": "lora_waiting",
    "llm_lora_adapters_max": "lora_max",
    v.REPLICA_DEGRADED: DEGRADED,  # one field per `reason` label: "degraded:<reason>"
    v.ENGINE_STARTUP: "startup_seconds",
    v.ENGINE_UP: "up",
    v.ENGINE_LAST_SUCCESS: "timestamp",
}

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_UNESCAPE_RE = re.compile(r"\\[\\\"n]")

ReplicaKey = tuple[str, str, str]  # (namespace, model, pod)
#: The `role` label rides in a replica's fields as its index in ROLES (fields are numbers); absent: unified.
ROLE_FIELD = "role"


def role_code(labels: Mapping[str, str]) -> float | None:
    """The ROLE_FIELD value for a series' labels: None for unified (or an unknown role, read as unified)."""
    role = labels.get("role", "")
    return float(v.ROLES.index(role)) if role in v.ROLES and role != "unified" else None


@dataclass
class ParsedExposition:
    """What one body held: per-replica fields, and how many values were unusable."""

    replicas: dict[ReplicaKey, dict[str, float]] = field(default_factory=dict)
    invalid_values: int = 0  # NaN/Inf/negative samples, dropped (the field reads as "not reported")
    clock_offset: float = 0.0  # the exporter's clock minus ours, corrected out of the timestamps (clocks.py)


def _unescape(value: str) -> str:
    return _UNESCAPE_RE.sub(lambda m: _UNESCAPE[m.group(0)], value)


def _labels(text: str, lineno: int) -> dict[str, str]:
    """`k="v",k2="v2"` -> dict. Fast path when no value holds an escape (the usual case)."""
    if "\\" not in text:
        parts = text.split('"')
        if len(parts) % 2 == 1:
            fast: dict[str, str] = {}
            for i in range(0, len(parts) - 1, 2):
                key = parts[i].strip()
                if i:
                    if key[:1] != ",":
                        raise SourceError("parse", f"line {lineno}: bad label set {{{text[:80]}}}")
                    key = key[1:].lstrip()
                if key[-1:] != "=":
                    raise SourceError("parse", f"line {lineno}: bad label set {{{text[:80]}}}")
                fast[key[:-1].rstrip()] = parts[i + 1]
            if parts[-1].strip() not in ("", ",") or (len(parts) == 1 and parts[0].strip()):
                raise SourceError("parse", f"line {lineno}: bad label set {{{text[:80]}}}")
            return fast
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text) and text[pos:].strip():
        m = _LABEL.match(text, pos)
        if m is None:
            raise SourceError("parse", f"line {lineno}: bad label set {{{text[:80]}}}")
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _value(text: str, lineno: int) -> float:
    """The sample value (an optional trailing timestamp is ignored)."""
    token = text.split(None, 1)[0] if text else ""
    try:
        return float(token)
    except ValueError:
        raise SourceError("parse", f"line {lineno}: value {token!r} is not a number") from None


def _check_other(line: str, lineno: int) -> None:
    """A line we do not read must still look like `name[{...}] value`."""
    m = _NAME.match(line)
    rest = line[m.end():] if m else ""
    if m is None or not rest or rest[0] not in " {\t":
        raise SourceError("parse", f"line {lineno}: not an exposition line: {line[:80]!r}")


_NAMES = "|".join(re.escape(n) for n in sorted(FIELD_OF, key=len, reverse=True))
#: A line we read: its name, then `{`, a space, or the end of the line; group 2 is the rest of the line.
#: Patterns start at the newline before a line: a literal first character lets the regex engine skip
#: ahead in C, where `^` in MULTILINE mode would try every position.
_WANTED = re.compile(r"\n[^\S\n]*(" + _NAMES + r")(?=[{ ]|[^\S\n]*(?:\n|\Z))([^\n]*)")
#: The newline before a line that is not blank, a comment, `name{...` or `name value`.
_BAD = re.compile(r"\n(?![^\S\n]*(?:\n|\Z|#|[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{|[ \t]+\S)))")
#: Characters of text scanned per regex call: between calls the interpreter can hand the GIL to the
#: gRPC loop (a 3 MB body in one C call would hold it for milliseconds).
CHUNK_CHARS = 128 * 1024


def parse_exposition(text: str) -> ParsedExposition:
    """Read the llm_* engine series of one exporter body, keyed by (namespace, model, pod).

    A series without a `pod` label (a static target) is keyed by `node/engine/role` instead, so
    two static engines on one node stay two replicas. Raises SourceError("parse") for a body
    that is not the text format, naming the first bad line.

    Two regex scans do the line-by-line work in C, a chunk at a time: one finds the lines we read,
    the other the first line that is not an exposition line at all; Python only looks at the lines
    we read (about one in six of an exporter's body: histogram buckets are most of the rest).
    """
    out = ParsedExposition()
    keys: dict[str, ReplicaKey] = {}  # label text -> replica: one label split per replica, not per line
    text = "\n" + text  # every line now follows a newline; line k follows the k-th one
    lineno, counted = 0, 0
    start, n = 0, len(text)
    while start < n:
        cut = text.find("\n", start + CHUNK_CHARS)
        end = n if cut == -1 else cut  # the chunk's last line ends at `end`; the next chunk starts there
        bad = _BAD.search(text, start, end)
        while bad is not None and _line_is_fine(_line_at(text, bad.start(), end)):
            bad = _BAD.search(text, bad.start() + 1, end)
        stop = bad.start() if bad is not None else end
        for m in _WANTED.finditer(text, start, stop):
            at = m.start()
            lineno += text.count("\n", counted, at + 1)
            counted = at + 1
            _read_series(FIELD_OF[m.group(1)], m.group(1), m.group(2), lineno, out, keys)
        if bad is not None:
            lineno += text.count("\n", counted, bad.start() + 1)
            _read_line(_line_at(text, bad.start(), end), lineno, out, keys)  # raises: the first bad line
            raise AssertionError("unreachable: a line _line_is_fine refused must fail")  # pragma: no cover
        start = end
    return out


def _line_at(text: str, newline: int, end: int) -> str:
    """The stripped line after the newline at `newline`."""
    eol = text.find("\n", newline + 1, end)
    return text[newline + 1: end if eol == -1 else eol].strip()


def _line_is_fine(raw: str) -> bool:
    """The slow check of a line the fast scan flagged (it is stricter on odd whitespace only)."""
    line = raw.strip()
    if not line or line[0] == "#":
        return True
    try:
        _read_line(line, 0, ParsedExposition(), {})
    except SourceError:
        return False
    return True


def _read_line(line: str, lineno: int, out: ParsedExposition, keys: dict[str, ReplicaKey]) -> None:
    """One stripped, non-comment line: store its value if it is a series we read, else check its shape."""
    brace = line.find("{")
    space = line.find(" ")
    has_labels = brace != -1 and (space == -1 or brace < space)
    name = line[: brace if has_labels else (space if space != -1 else len(line))]
    fname = FIELD_OF.get(name)
    if fname is None:
        _check_other(line, lineno)
        return
    _read_series(fname, name, line[len(name):], lineno, out, keys)


def _read_series(fname: str, name: str, rest: str, lineno: int, out: ParsedExposition,
                 keys: dict[str, ReplicaKey]) -> None:
    """The part of a line we read after its name (`{labels} value [timestamp]` or ` value`)."""
    if rest[:1] == "{":
        close = rest.rfind("}")
        if close < 0:
            raise SourceError("parse", f"line {lineno}: unclosed label set: {(name + rest)[:80]!r}")
        label_text = rest[1:close]
        rest = rest[close + 1:]
    else:
        label_text = ""
    value = _value(rest.strip(), lineno)
    key = keys.get(label_text)
    if key is None:
        labels = _labels(label_text, lineno) if label_text else {}
        model = labels.get("model", "")
        pod = labels.get("pod") or f"{labels.get('node', '')}/{labels.get('engine', '')}/{labels.get('role', '')}"
        key = keys[label_text] = (labels.get("namespace", ""), model, pod)
        code = role_code(labels)
        if model and code is not None:
            out.replicas.setdefault(key, {})[ROLE_FIELD] = code
    if not key[1]:
        return  # an engine series without a model cannot belong to any ScaledObject
    if fname == DEGRADED:  # rare (a few per replica): the reason label names the field
        fname = degraded_field(_labels(label_text, lineno).get("reason", ""))
    fields = out.replicas.setdefault(key, {})
    if not math.isfinite(value) or value < 0:
        out.invalid_values += 1
        return
    fields[fname] = value


def degraded_field(reason: str) -> str:
    """The field name one `llm_replica_degraded{reason}` series is read into."""
    return f"{DEGRADED}:{reason}"


def replica_sample(pod: str, fields: Mapping[str, float]) -> ReplicaSample:
    """Fields read for one pod -> ReplicaSample.

    `degraded:<reason>` fields at 1 become the sample's `degraded` reasons (sorted).

    `up` is llm_engine_up == 1; without that series a replica is up if it reports any signal.
    Without llm_engine_last_success_timestamp_seconds the timestamp is 0: a replica whose
    freshness cannot be told is never fresh (the policy then holds rather than scales down).
    """
    up_value = fields.get("up")
    signals = {k: val for k, val in fields.items() if k not in ("up", "timestamp", ROLE_FIELD) and ":" not in k}
    degraded = tuple(sorted(k.split(":", 1)[1] for k, val in fields.items() if k.startswith(DEGRADED + ":")
                            and val == 1.0))
    up = up_value == 1.0 if up_value is not None else bool(signals)
    code = fields.get(ROLE_FIELD)
    role = v.ROLES[int(code)] if code is not None and 0 <= int(code) < len(v.ROLES) else "unified"
    return ReplicaSample(pod=pod, timestamp=fields.get("timestamp", 0.0), up=up, role=role, degraded=degraded,
                         **signals)


def observations_from_replicas(
    replicas: Iterable[tuple[ReplicaKey, Mapping[str, float]]], now: float
) -> list[Observation]:
    """Group per-replica fields by (namespace, model); pods sorted by name, models by key."""
    by_model: dict[tuple[str, str], list[ReplicaSample]] = {}
    for (namespace, model, pod), fields in replicas:
        by_model.setdefault((namespace, model), []).append(replica_sample(pod, fields))
    return [
        Observation(namespace=ns, model=model, at=now, replicas=tuple(sorted(samples, key=lambda s: s.pod)))
        for (ns, model), samples in sorted(by_model.items())
    ]


def observations_from_exposition(text: str, now: float) -> list[Observation]:
    """One exporter body -> one Observation per (namespace, model) it reports, at time `now`."""
    return observations_from_replicas(parse_exposition(text).replicas.items(), now)
