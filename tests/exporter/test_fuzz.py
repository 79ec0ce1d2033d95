"""Fuzzing as a habit: the engine-body path and the exporter config let only their documented errors out.

A seeded run of scripts/fuzz_exporter.py's plain generator (the long opt-in run uses the same one with a
million inputs), and hypothesis properties over generated exposition text and config maps.
"""

from __future__ import annotations

from conftest import load_script
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keda_llm.exporter.config import ConfigError, parse_config
from keda_llm.exporter.errors import ScrapeError
from keda_llm.exporter.parse import parse


def test_thirty_thousand_mutated_bodies_and_configs_raise_only_the_documented_errors() -> None:
    ran, failures = load_script("fuzz_exporter").run(30_000, seed=20261124)
    assert ran == 30_000
    assert failures == []


_name = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
_label_value = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "9" * 400, "", "x"]),
                   st.integers(-10**30, 10**30).map(str))


@st.composite
def exposition_line(draw: st.DrawFn) -> tuple[str, str | None]:
    """A line and the sample name it carries (None for a comment line)."""
    name = draw(_name)
    labels = draw(st.dictionaries(_name, _label_value, max_size=3))
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = f"{name}{{{inner}}} {draw(_value)}" if labels or draw(st.booleans()) else f"{name} {draw(_value)}"
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["# TYPE ", "# HELP ", "# EOF", "#"])) + line, None
    return line, name


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(exposition_line(), max_size=12), st.text(max_size=40))
def test_the_parser_returns_samples_or_a_scrape_error(lines: list[tuple[str, str | None]], junk: str) -> None:
    text = "\n".join(line for line, _ in lines)
    for body in (text, text + junk):
        try:
            samples = parse(body)
        except ScrapeError as err:
            assert err.reason in ("parse", "duplicate", "invalid_value")
            continue
        assert all(isinstance(sample.value, float) for sample in samples)
        if body == text:  # what parses is what was written: no sample from a comment, none invented
            assert {sample.name for sample in samples} <= {name for _, name in lines if name is not None}


_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                               st.text(max_size=20)),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.text(max_size=10), inner, max_size=3)),
                     max_leaves=10)
_keys = st.sampled_from(["listen", "interval", "timeout", "max_body_bytes", "node_name", "targets", "kubernetes",
                         "gpu", "unknown"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=5))
def test_the_exporter_config_refuses_with_config_error_only(data: dict[str, object]) -> None:
    try:
        parse_config(data, {"NODE_NAME": "n"})
    except ConfigError as err:
        assert err.key
