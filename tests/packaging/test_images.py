"""The images: deploy/Dockerfile builds one target per part from hash-locked dependencies, and the
production targets carry none of the simulator's heavy ones. (No container runtime here: these check
the file against the project it packages.)"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
HEAVY = {"numba", "llvmlite", "matplotlib", "contourpy", "fonttools", "kiwisolver", "pillow"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _locked(path: Path) -> dict[str, str]:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.M))
    text = path.read_text()
    for name in pins:  # every pin carries at least one hash
        block = text[text.index(f"{name}=="):].split("\n\n", 1)[0]
        assert "--hash=sha256:" in block, name
    return {k.lower(): v for k, v in pins.items()}


def test_every_part_folder_is_copied_into_the_build() -> None:
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \./\S+$", DOCKERFILE, re.M))
    assert folders <= copied, folders - copied


def test_one_target_per_part_each_running_its_command() -> None:
    for part in ("exporter", "scaler", "activator"):
        assert re.search(rf"^FROM core AS {part}\nCMD \[\"{part}\"\]$", DOCKERFILE, re.M), part
    assert DOCKERFILE.rstrip().splitlines()[-1].startswith("ENV NUMBA_CACHE_DIR")  # `all` is the last: the default
    assert "USER 65532" in DOCKERFILE and "--require-hashes" in DOCKERFILE


def test_the_core_lock_holds_every_core_dependency_and_nothing_heavy() -> None:
    core = _locked(ROOT / "deploy" / "requirements.lock")
    assert {_name(r) for r in PYPROJECT["project"]["dependencies"]} <= set(core)
    assert HEAVY & set(core) == set()
    sim = _locked(ROOT / "deploy" / "requirements-sim.lock")
    assert {_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["sim"]} <= set(sim)
    assert {k: v for k, v in sim.items() if k in core} == core  # the same versions where both pin a package
