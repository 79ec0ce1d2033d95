"""A client that goes away mid-answer (a scrape cut short, Ctrl-C on a poller) costs a debug line on the
scaler's and the exporter's HTTP servers, never socketserver's traceback on stderr; other errors are logged."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from scaler_harness import FakeClock, FakeHistory, ServerThread, make_service

from keda_llm.exporter.server import create_server


class _Source:
    def exposition(self, gzipped: bool = False) -> bytes:
        return b""

    def healthy(self) -> bool:
        return True


def _raise_into(handle_error: Callable[[Any, Any], None], err: Exception) -> None:
    try:
        raise err
    except Exception:
        handle_error(None, ("127.0.0.1", 5555))


@pytest.mark.parametrize("part", ["scaler", "exporter"])
def test_a_client_gone_is_a_debug_line_and_a_bug_is_logged(part: str, capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    if part == "scaler":
        st = ServerThread(make_service({("llm", "m"): FakeHistory(desired=1)}, FakeClock()))
        assert st.server.http is not None
        handle_error, stop = st.server.http.handle_error, st.stop
    else:
        server, _ = create_server(("127.0.0.1", 0), _Source())
        server.start()
        handle_error, stop = server._httpd.handle_error, server.stop
    try:
        for gone in (ConnectionResetError(104, "Connection reset by peer"), BrokenPipeError(32, "Broken pipe")):
            _raise_into(handle_error, gone)
        assert capsys.readouterr().err == ""
        assert [r.levelno for r in caplog.records if "client went away" in r.message] == [logging.DEBUG] * 2
        _raise_into(handle_error, RuntimeError("a bug"))
        (bug,) = [r for r in caplog.records if "request failed" in r.message]
        assert bug.levelno == logging.ERROR and bug.exc_info is not None
    finally:
        stop()
