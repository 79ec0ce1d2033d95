"""The one address grammar (common/addresses.py), and that the exporter, the scaler and the activator
read every address alike: three hand-written parsers had drifted apart before."""

from __future__ import annotations

import random

import pytest

from keda_llm.activator.config import ConfigError as ActivatorConfigError
from keda_llm.activator.config import parse as parse_activator
from keda_llm.common.addresses import host_port
from keda_llm.exporter.config import ConfigError as ExporterConfigError
from keda_llm.exporter.config import parse_listen

GOOD = [
    (":9400", ("", 9400)),
    ("0.0.0.0:9400", ("0.0.0.0", 9400)),
    ("exporter.local:1", ("exporter.local", 1)),
    ("[::]:9090", ("::", 9090)),
    ("[::1]:0", ("::1", 0)),
    ("[fe80::1%eth0]:9090", ("fe80::1%eth0", 9090)),
    ("  127.0.0.1:65535 ", ("127.0.0.1", 65535)),
]
BAD = ["", "   ", "9400", "host", ":", "host:", ":65536", ":99999", ":-1", ":9400x", ":\u00b2", ":\u0663",
       "[::1", "[::1]]:80", "[[::1]]:80", "[]:80", "[::1]80", "::1:9400", "a]:80", "h:80:90",
       "http://h:80", "h :80", "h:80/x", "\x00:80", ":" + "9" * 400, "[h:80:90]:80", "[foo]:80", "[1.2.3.4]:80"]


@pytest.mark.parametrize("text,expected", GOOD)
def test_every_spelling_the_docs_use_reads_as_host_and_port(text: str, expected: tuple[str, int]) -> None:
    assert host_port(text) == expected


@pytest.mark.parametrize("text", BAD)
def test_a_bad_address_is_a_value_error_saying_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError) as e:
        host_port(text)
    assert str(e.value)


def test_a_default_port_lets_a_bare_host_or_bare_ipv6_through_and_nothing_else() -> None:
    assert host_port("scaler.local", 9090) == ("scaler.local", 9090)
    assert host_port("::1", 9090) == ("::1", 9090)
    assert host_port("[::1]", 9090) == ("::1", 9090)
    for bad in ("[::1", "[::1]]:80", "h:99999", "", "a b"):
        with pytest.raises(ValueError):
            host_port(bad, 9090)


def _activator_accepts(text: str) -> bool:
    try:
        parse_activator({"listen": text, "models": [{"name": "m", "endpoints": ["http://x:1"]}]})
    except ActivatorConfigError:
        return False
    return True


def _exporter_accepts(text: str) -> bool:
    try:
        parse_listen(text, "listen")
    except ExporterConfigError:
        return False
    return True


@pytest.mark.parametrize("text", [t for t, _ in GOOD] + BAD)
def test_exporter_and_activator_agree_with_the_grammar(text: str) -> None:
    try:
        host_port(text)
        ok = True
    except ValueError:
        ok = False
    assert _exporter_accepts(text) is ok
    assert _activator_accepts(text) is ok


def test_fuzz_only_value_error_escapes() -> None:
    rng = random.Random(20261130)
    alphabet = ":[]0123456789abz.\u00b2 /\x00-"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        default = rng.choice([None, 80])
        try:
            host, port = host_port(text, default)
        except ValueError:
            continue
        assert 0 <= port <= 65535 and "[" not in host and "]" not in host


def test_the_scalers_metadata_and_peers_read_addresses_by_the_same_grammar() -> None:
    """Found by a review: `exportersService` was checked with urlsplit and dialled with host_port, so
    `exp.ns.svc/` passed the check and failed every RPC as INTERNAL; peers turned port 0 into the default."""
    from keda_llm.scaler.activation import parse_peer
    from keda_llm.scaler.config import parse_host_port

    for text in [t for t, _ in GOOD] + BAD + ["exp.ns.svc/", "exp.ns.svc:", "h:9091:x", "fd00::7", "exp.ns.svc"]:
        try:
            host, port = host_port(text, 9400)
            dialable = bool(host) and port != 0
        except ValueError:
            dialable = False
        try:
            parse_host_port(text)
            metadata = True
        except ValueError:
            metadata = False
        try:
            parse_peer(text, 9091)
            peer = True
        except ValueError:
            peer = False
        assert metadata is dialable and peer is dialable, text
    assert host_port("fd00::7", 9400) == ("fd00::7", 9400)
    with pytest.raises(ValueError, match="neither host:port nor an IPv6 address"):
        host_port("h:9091:x", 9091)


def test_the_interval_floor_holds_at_exactly_100ms_in_any_unit() -> None:
    """Found by a review: 100000us sums to 0.09999999999999999 and was refused as under 100ms."""
    from keda_llm.common.durations import check_interval, parse_duration

    for text in ("100ms", "100000us", "100000\u00b5s", "100000000ns", "0.1s", "0.1"):
        assert check_interval(parse_duration(text)) == pytest.approx(0.1)
    for text in ("99ms", "99999us", "0.0999s"):
        with pytest.raises(ValueError, match="at least 100ms"):
            check_interval(parse_duration(text))
