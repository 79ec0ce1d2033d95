"""Shared test helpers: paths to the bundled fixtures, and the repository's scripts as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).parent
SCRIPTS = TESTS.parent / "scripts"
ENGINE_FIXTURES = TESTS / "fixtures" / "engines"


def engine_body(name: str) -> str:
    """The exact bytes of a bundled engine /metrics body, as text."""
    return (ENGINE_FIXTURES / name).read_text()


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (scripts/ is not a package: tools run it, tests import it this way),
    registered under its name first, as an import would (a dataclass in it looks its module up there)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
