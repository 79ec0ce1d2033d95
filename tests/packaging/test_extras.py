"""The exporter, scaler and activator run on the core dependencies alone; simulate says which extra it
needs (so does the demo's live view, which needs rich). The [sim] extra's numba, matplotlib, rich and
jsonschema are hidden from a child process (an import of any fails as if not installed), which then starts
the real commands."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

BLOCK = textwrap.dedent("""
    import importlib.abc, sys
    HIDDEN = {"numba", "llvmlite", "matplotlib", "rich", "jsonschema"}
    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, Hide())
    from keda_llm.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _run(*argv: str, until: str | None = None, timeout: float = 60) -> tuple[int, str]:
    """The command with the [sim] extra hidden; with `until`, stop it once stderr shows that text."""
    proc = subprocess.Popen([sys.executable, "-c", BLOCK, *argv], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    if until is None:
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if re.search(until, line):
            break
    proc.terminate()
    proc.communicate(timeout=timeout)
    return 0 if any(re.search(until, line) for line in seen) else 1, "".join(seen)


@pytest.mark.parametrize(("argv", "ready"), [
    (("scaler", "--no-kube", "--grpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"),
     r"scaler serving gRPC"),
    (("exporter", "--listen", "127.0.0.1:0", "--target", "http://127.0.0.1:9/metrics"), r"serving http://"),
    (("activator", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--model", "m", "--upstream",
      "http://127.0.0.1:9"), r"activator: proxy on :\d+"),
])
def test_production_parts_start_without_the_simulators_dependencies(argv: tuple[str, ...], ready: str) -> None:
    code, err = _run(*argv, until=ready)
    assert code == 0, err
    assert "Traceback" not in err, err


def test_simulate_names_the_extra_it_needs() -> None:
    code, err = _run("simulate", "--trace", "azure-code-2023", "--window", "0:60", "--policies", "static")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "pip install -e '.[sim]'" in lines[0], err


def test_the_demo_names_the_extra_it_needs_and_ends() -> None:
    """Without the extra the demo's parts stop before they started; stopping the exporter's server that never
    served waited for ever (a review found the demo hanging with no output in a core-only install)."""
    code, err = _run("demo", "--duration", "20", "--plain", timeout=60)
    assert code != 0 and "Traceback" not in err, err
    assert "pip install -e '.[sim]'" in err or "pip install -e '.[demo]'" in err, err
