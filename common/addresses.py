"""`host:port` as every part's flags and files write it: the one address grammar.

The exporter, the scaler and the activator each listen on, or connect to, addresses given as
`host:port`, `:port` (every interface), `[v6]:port` and, where a default port applies, a bare host or a
bare IPv6 address. Three hand-written parsers had drifted apart (one took `[::1]]:80`, one took
non-ASCII digits); this is the one rule. Errors are plain ValueErrors saying what is wrong; each caller
wraps them with the flag or key it was reading.
"""

from __future__ import annotations

import ipaddress


def host_port(text: str, default_port: int | None = None) -> tuple[str, int]:
    """(host, port) from `host:port`, `[v6]:port`, `:port` (host "": every address) or, with a
    `default_port`, a bare host or bare IPv6 address. Surrounding blanks are ignored.

    Without a default the port is required, and an unbracketed IPv6 address is refused rather than
    guessed at (`::1:9400` could be either)."""
    text = text.strip()
    if not text:
        raise ValueError("empty address: expected host:port, e.g. :8080 or 127.0.0.1:8080")
    if any(c.isspace() or c in "/\x00" for c in text):
        raise ValueError(f"{text!r}: expected host:port, with no spaces, slashes or scheme")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: an IPv6 address needs its closing ]")
        host, rest = text[1:end], text[end + 1:]
        if not host or "[" in host:
            raise ValueError(f"{text!r}: expected [v6]:port")
        try:  # brackets hold an IPv6 address (with a %zone where it has one), nothing else
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} in brackets is not an IPv6 address") from None
        if not rest:
            if default_port is None:
                raise ValueError(f"{text!r}: expected [v6]:port, with the port")
            return host, default_port
        if not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected [v6]:port")
        port = rest[1:]
    elif "[" in text or "]" in text:
        raise ValueError(f"{text!r}: brackets go around an IPv6 address only, as [v6]:port")
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif default_port is None:
        if ":" in text:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, as [::1]:8080")
        raise ValueError(f"{text!r}: expected host:port, e.g. :8080 or 127.0.0.1:8080")
    elif ":" in text:  # a bare IPv6 address, or a mistake such as h:80:90
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            raise ValueError(f"{text!r}: neither host:port nor an IPv6 address ([v6]:port with a port)") from None
        return text, default_port
    else:  # a bare host
        return text, default_port
    # ASCII digits only: str.isdigit() takes '²' (int() then fails) and other scripts' digits
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535):
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535")
    return host, int(port)
