"""A fast reader of the Prometheus text format 0.0.4 and OpenMetrics 1.0, keeping only wanted samples.

Why not prometheus_client's parser: the exporter reads a handful of families out of a 50 KB vLLM body
for several engines every few seconds. Here the sample name is cut off first and `wanted(name)` decides
before the labels and value are read, and a canonical line (what every engine's client library writes)
is matched by one compiled regex. Lines that do not match it (blanks around tokens, tabs, CRLF) go
through a slower tolerant reader, which also produces the error message naming the line.

Lines of families that `wanted` rejects are not validated beyond their name: speed over pedantry for
data we throw away. Comment lines (`# HELP`, `# TYPE`, `# UNIT`, others) are skipped; `# EOF` ends an
OpenMetrics body and nothing but blank lines may follow it. Exemplars (` # {...} v [ts]`) and
timestamps are accepted and dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import Sample

Wanted = Callable[[str], bool]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LABEL = _LABEL_NAME + r'="[^"\\]*(?:\\[\\"n][^"\\]*)*"'
# name{l="v",...} value [timestamp] [# exemplar]: the canonical spelling, no blanks inside the braces.
# A value never starts with '{': `name {l="v"} 1` (a blank before the labels) is left to the tolerant reader.
_LINE = re.compile(
    rf"({_NAME})"
    rf"(?:\{{((?:{_LABEL}(?:,{_LABEL})*,?)?)\}})?"
    r" ([^ \t#{][^ \t]*)"
    r"(?: ([^ \t#][^ \t]*))?"
    r"(?: # .*)?"
)
_PAIR = re.compile(rf'({_LABEL_NAME})="([^"\\]*(?:\\.[^"\\]*)*)"')
_NAME_END = re.compile(r"[{ \t]")
_VALID_NAME = re.compile(_NAME)
_VALID_LABEL_NAME = re.compile(_LABEL_NAME)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_QUOTE_OR_ESCAPE = re.compile(r'["\\]')  # where a label value's run of plain characters ends


def parse(body: str, wanted: Wanted | None = None) -> list[Sample]:
    """The samples of `body` whose name `wanted` accepts (all when None), in body order.

    Raises ScrapeError("parse") naming the 1-based line number of the first malformed line.
    """
    if "\r" in body:
        body = body.replace("\r\n", "\n")
    out: list[Sample] = []
    append = out.append
    decided: dict[str, bool] = {}
    line_match = _LINE.fullmatch
    name_of = _NAME_END.split
    eof_at = 0
    for lineno, line in enumerate(body.split("\n"), 1):
        if not line:
            continue
        if eof_at:
            if line.strip():
                raise _error(lineno, f"text after '# EOF' (line {eof_at})", line)
            continue
        if line[0] == "#":
            if line == "# EOF":
                eof_at = lineno
            continue
        if wanted is not None:
            # the name ends at the first blank or '{' (cheap finds; a tab is rare and takes the regex)
            space = line.find(" ")
            brace = line.find("{", 0, space) if space > 0 else line.find("{")
            name = line[:brace] if brace >= 0 else line[:space] if space >= 0 else line
            keep = decided.get(name)
            if keep is None:
                if "\t" in name:
                    name = name_of(line, 1)[0]
                keep = decided[name] = wanted(name)
            if not keep:
                continue
        m = line_match(line)
        if m is None:
            sample = _parse_tolerant(line, lineno)
            if sample is None:  # a blank or comment line indented with blanks
                if line.strip() == "# EOF":
                    eof_at = lineno
                continue
            if wanted is not None and not wanted(sample.name):
                continue
            append(sample)
            continue
        name, labels_text, value_text, ts_text = m.groups()
        append(Sample(name, _labels(labels_text, line, lineno) if labels_text else {},
                      _value(value_text, line, lineno)))
        if ts_text is not None:
            _value(ts_text, line, lineno)
    return out


def _error(lineno: int, what: str, line: str) -> ScrapeError:
    shown = line if len(line) <= 120 else line[:117] + "..."
    return ScrapeError("parse", f"line {lineno}: {what}: {shown!r}")


def _value(text: str, line: str, lineno: int) -> float:
    """A sample value or timestamp: Go's ParseFloat spellings (NaN, +Inf, -Inf, 1e3), no '_' separators."""
    try:
        if "_" in text:
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise _error(lineno, f"bad value {text!r}", line) from None


def _labels(text: str, line: str, lineno: int) -> dict[str, str]:
    pairs = _PAIR.findall(text)
    labels = dict(pairs)
    if len(labels) != len(pairs):
        raise _error(lineno, "duplicate label name", line)
    if "\\" in text:
        for key, value in labels.items():
            if "\\" in value:
                labels[key] = _unescape(value, line, lineno)
    return labels


def _unescape(value: str, line: str, lineno: int) -> str:
    out: list[str] = []
    i = 0
    while True:
        j = value.find("\\", i)
        if j < 0:
            out.append(value[i:])
            return "".join(out)
        out.append(value[i:j])
        replacement = _ESCAPES.get(value[j + 1:j + 2])
        if replacement is None:
            raise _error(lineno, f"bad escape {value[j:j + 2]!r} in a label value", line)
        out.append(replacement)
        i = j + 2


def _parse_tolerant(raw: str, lineno: int) -> Sample | None:
    """The slow path: blanks and tabs between tokens, and precise errors for what does not parse."""
    line = raw.strip(" \t")
    if not line or line[0] == "#":
        return None
    m = _VALID_NAME.match(line)
    if m is None:
        raise _error(lineno, "missing or invalid metric name", raw)
    name = m.group()
    pos = m.end()
    labels: dict[str, str] = {}
    brace = _skip_blanks(line, pos)
    if brace < len(line) and line[brace] == "{":
        pos = _read_label_set(line, brace + 1, labels, raw, lineno)
    if pos < len(line) and line[pos] not in " \t":
        raise _error(lineno, f"unexpected {line[pos]!r} after the metric name", raw)
    rest = line[pos:]
    exemplar = rest.find(" # ")
    if exemplar >= 0:
        rest = rest[:exemplar]
    tokens = rest.split()
    if not tokens:
        raise _error(lineno, "missing value", raw)
    if len(tokens) > 2:
        raise _error(lineno, f"unexpected text after the value: {' '.join(tokens[2:])!r}", raw)
    value = _value(tokens[0], raw, lineno)
    if len(tokens) == 2:
        _value(tokens[1], raw, lineno)
    return Sample(name, labels, value)


def _skip_blanks(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _read_label_set(line: str, pos: int, labels: dict[str, str], raw: str, lineno: int) -> int:
    """Reads `name="value", ...}` from `pos`; returns the position after the closing brace."""
    while True:
        pos = _skip_blanks(line, pos)
        if pos >= len(line):
            raise _error(lineno, "unterminated label set", raw)
        if line[pos] == "}":
            return pos + 1
        m = _VALID_LABEL_NAME.match(line, pos)
        if m is None:
            raise _error(lineno, f"invalid label name at column {pos + 1}", raw)
        key = m.group()
        pos = _skip_blanks(line, m.end())
        if pos >= len(line) or line[pos] != "=":
            raise _error(lineno, f"expected '=' after label {key!r}", raw)
        pos = _skip_blanks(line, pos + 1)
        if pos >= len(line) or line[pos] != '"':
            raise _error(lineno, f"label {key!r} value is not quoted", raw)
        pos, value = _read_quoted(line, pos + 1, raw, lineno)
        if key in labels:
            raise _error(lineno, f"duplicate label name {key!r}", raw)
        labels[key] = value
        pos = _skip_blanks(line, pos)
        if pos >= len(line):
            raise _error(lineno, "unterminated label set", raw)
        if line[pos] == ",":
            pos += 1
        elif line[pos] != "}":
            raise _error(lineno, f"expected ',' or '}}' at column {pos + 1}", raw)


def _read_quoted(line: str, pos: int, raw: str, lineno: int) -> tuple[int, str]:
    """Reads a label value after its opening quote; returns the position after the closing one. Runs without
    an escape are taken whole (a character at a time took 0.36 s for a 1 MB value)."""
    out: list[str] = []
    special = _QUOTE_OR_ESCAPE.search
    while True:
        m = special(line, pos)
        if m is None:
            raise _error(lineno, "unterminated label value", raw)
        end = m.start()
        out.append(line[pos:end])
        if line[end] == '"':
            return end + 1, "".join(out)
        replacement = _ESCAPES.get(line[end + 1:end + 2])  # line[end] is a backslash
        if replacement is None:
            raise _error(lineno, f"bad escape {line[end:end + 2]!r} in a label value", raw)
        out.append(replacement)
        pos = end + 2
