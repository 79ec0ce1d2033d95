"""exporter.parse against prometheus_client's parsers (the reference), on every engine body and edge cases."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable

import pytest
from conftest import ENGINE_FIXTURES
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from keda_llm.exporter.engines import ADAPTERS
from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.model import Sample
from keda_llm.exporter.parse import parse

ENGINE_BODIES = sorted(p.name for p in ENGINE_FIXTURES.glob("*.prom"))
EDGE = ENGINE_FIXTURES / "edge"

Key = tuple[str, tuple[tuple[str, str], ...], object]


def _key(name: str, labels: dict[str, str], value: float) -> Key:
    # NaN != NaN: compare it as a marker so a NaN on both sides matches
    return name, tuple(sorted(labels.items())), "NaN" if math.isnan(value) else float(value)


def ours(body: str, wanted: Callable[[str], bool] | None = None) -> list[Key]:
    return sorted(_key(s.name, s.labels, s.value) for s in parse(body, wanted))


def reference(body: str, wanted: Callable[[str], bool] | None = None, openmetrics: bool = False) -> list[Key]:
    """prometheus_client's samples as the body spells their names.

    Its text parser appends `_total` to the samples of a counter whose TYPE name lacks it (TGI's
    `tgi_request_success`); that rename is undone here so both sides name samples as exposed.
    """
    families = openmetrics_families(body) if openmetrics else text_families(body)  # type: ignore[no-untyped-call]
    bare_counters = {m for m in re.findall(r"^# TYPE (\S+) counter$", body, re.M) if not m.endswith("_total")}
    out = []
    for family in families:
        for s in family.samples:
            name = s.name
            if not openmetrics and name.endswith("_total") and name[:-6] in bare_counters:
                name = name[:-6]
            if wanted is None or wanted(name):
                out.append(_key(name, s.labels, s.value))
    return sorted(out)


def read(name: str) -> str:
    return (ENGINE_FIXTURES / name).read_text()


@pytest.mark.parametrize("body_name", ENGINE_BODIES)
def test_every_sample_of_every_engine_body_matches_prometheus_client(body_name: str) -> None:
    body = read(body_name)
    expected = reference(body)
    assert len(expected) > 0
    assert ours(body) == expected


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
@pytest.mark.parametrize("body_name", ENGINE_BODIES)
def test_the_families_each_adapter_reads_match_prometheus_client(body_name: str, engine: str) -> None:
    body = read(body_name)
    wanted = ADAPTERS[engine].wanted.__contains__
    assert ours(body, wanted) == reference(body, wanted)


def test_the_filter_keeps_exactly_the_wanted_names() -> None:
    body = read("vllm-0.32.0-cpu-load.prom")
    got = parse(body, {"vllm:num_requests_running", "vllm:num_requests_waiting"}.__contains__)
    assert got == [
        Sample("vllm:num_requests_running", {"engine": "0", "model_name": "smollm2"}, 16.0),
        Sample("vllm:num_requests_waiting", {"engine": "0", "model_name": "smollm2"}, 0.0),
    ]


def test_edge_cases_match_prometheus_client_text_parser() -> None:
    body = (EDGE / "edge-cases.prom").read_text()
    assert ours(body) == reference(body)


def test_edge_cases_values_by_hand() -> None:
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse((EDGE / "edge-cases.prom").read_text())}
    assert got[("esc_info", (("nl", "two\nlines"), ("path", "C:\\dir\\file"), ("quote", 'say "hi"')))] == 1.0
    assert math.isnan(got[("special", (("kind", "nan"),))])
    assert got[("special", (("kind", "inf"),))] == math.inf
    assert got[("special", (("kind", "ninf"),))] == -math.inf
    assert got[("special", (("kind", "exp"),))] == 1500.0
    assert got[("stamped", (("a", "1"),))] == 3.5  # the timestamp is dropped, not taken as the value
    assert got[("tricky", (("a", "x} y, z # w"), ("b", "=,{")))] == 8.0
    assert got[("tricky", (("a", "trailing comma"),))] == 9.0
    assert got[("tricky", ())] == 10.0
    assert got[("tricky", (("a", "spaced"), ("b", "2")))] == 11.0
    assert got[("tricky", (("a", "tab"),))] == 12.0
    assert got[("plain_counter", ())] == 42.0


def test_openmetrics_with_exemplars_units_and_eof_matches_prometheus_client_openmetrics_parser() -> None:
    body = (EDGE / "openmetrics.prom").read_text()
    expected = reference(body, openmetrics=True)
    assert ours(body) == expected
    assert ("om_requests_total", (("code", "200"),), 17.0) in expected  # the exemplar's 1.0 is not the value
    assert ("om_gauge", (("path", 'a\\b"c\nd'),), "NaN") in expected


def test_crlf_line_endings_and_indented_lines() -> None:
    body = '# TYPE a gauge\r\na{x="1"} 2\r\n   b 3  \r\n\t# comment\r\n'
    assert parse(body) == [Sample("a", {"x": "1"}, 2.0), Sample("b", {}, 3.0)]
    assert ours(body) == reference(body)


def test_blank_lines_after_eof_are_fine() -> None:
    assert parse("a 1\n# EOF\n\n") == [Sample("a", {}, 1.0)]


def _lines(*bad: str) -> str:
    return "\n".join(("# TYPE good gauge", "good 1", *bad, "good_after 2"))


MALFORMED = {
    "unterminated label set": ('broken{a="1"', "unterminated label set"),
    "unterminated label value": ('broken{a="1} 2', "unterminated label value"),
    "missing closing brace before value": ('broken{a="1" 2', "expected ',' or '}'"),
    "bad value": ("broken 1.2.3", "bad value '1.2.3'"),
    "word as value": ('broken{a="1"} abc', "bad value 'abc'"),
    "underscore in value": ("broken 1_000", "bad value '1_000'"),
    "bad timestamp": ("broken 1 soon", "bad value 'soon'"),
    "missing value": ('broken{a="1"}', "missing value"),
    "missing value, no labels": ("broken", "missing value"),
    "bad escape": ('broken{a="x\\q"} 1', "bad escape '\\\\q'"),
    "unquoted label value": ("broken{a=1} 1", "label 'a' value is not quoted"),
    "invalid label name": ('broken{1a="x"} 1', "invalid label name"),
    "duplicate label name": ('broken{a="x",a="y"} 1', "duplicate label name"),
    "no metric name": ('{a="x"} 1', "missing or invalid metric name"),
    "extra tokens": ("broken 1 2 3", "unexpected text after the value"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_line_is_a_parse_error_naming_the_line(case: str) -> None:
    line, what = MALFORMED[case]
    with pytest.raises(ScrapeError) as err:
        parse(_lines(line))
    assert err.value.reason == "parse"
    assert str(err.value).startswith(f"parse: line 3: {what}"), str(err.value)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_wanted_line_is_an_error_under_a_filter_too(case: str) -> None:
    line, _ = MALFORMED[case]
    name = re.match(r"[^{ \t]*", line)
    assert name is not None
    with pytest.raises(ScrapeError, match="line 3"):
        parse(_lines(line), {name.group(), "good"}.__contains__)


def test_malformed_line_of_an_unwanted_family_is_skipped_unread() -> None:
    assert parse(_lines('other{a="1" oops'), {"good"}.__contains__) == [Sample("good", {}, 1.0)]


def test_text_after_eof_is_an_error() -> None:
    with pytest.raises(ScrapeError, match=r"line 3: text after '# EOF' \(line 2\)"):
        parse("a 1\n# EOF\nb 2\n")


def _names(samples: Iterable[Sample]) -> list[str]:
    return [s.name for s in samples]


def test_samples_come_in_body_order() -> None:
    assert _names(parse("z 1\na 2\nm 3\n")) == ["z", "a", "m"]


def test_tab_after_a_wanted_name_is_still_wanted() -> None:
    assert parse("good\t1\nother\t2\n", {"good"}.__contains__) == [Sample("good", {}, 1.0)]


@pytest.mark.parametrize("value", ['x', '', 'a\\\\', '\\\\', '\\"q\\"', 'line\\nnext', 'é ü {} , = # }',
                                   'x' * 200_000 + '\\n' + 'y' * 3])
def test_the_tolerant_reader_reads_label_values_as_the_canonical_one_does(value: str) -> None:
    # a blank before the braces sends a line to the tolerant reader, which now takes runs without an
    # escape whole (it read a 1 MB value a character at a time, 0.36 s: bench/bench_parse.py)
    (canonical,) = parse(f'm{{a="{value}",b="2"}} 1\n')
    (tolerant,) = parse(f'm {{ a = "{value}" , b="2" }}\t1\n')
    assert tolerant == canonical


@pytest.mark.parametrize(("line", "error"), [('m {a="x\\q"} 1', "bad escape"), ('m {a="x\\', "bad escape"),
                                             ('m {a="xyz', "unterminated label value")])
def test_the_tolerant_reader_names_a_bad_label_value(line: str, error: str) -> None:
    with pytest.raises(ScrapeError, match=error):
        parse(line + "\n")
