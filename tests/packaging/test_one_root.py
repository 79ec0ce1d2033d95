"""One import root: a wheel of the repository installs `keda_llm` and nothing else at top level.

The repository keeps a folder per part (`scaler/`, `exporter/`, ...); pyproject's package-dir installs
each under `keda_llm`. From the repository root those folders are still importable by their bare names,
which gives two copies of every module: code, tests, benchmarks and scripts import through the root only.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PART_FOLDERS = ("common", "exporter", "scaler", "simulator")


def _package_dir() -> dict[str, str]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"])


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if (ROOT / line).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a clean copy of the repository (its tracked and new files, nothing ignored)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    for rel in _tracked_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(base / "dist"), str(src)], check=True, capture_output=True)
    (found,) = (base / "dist").glob("keda_llm-*.whl")
    return found


def test_the_wheel_installs_only_keda_llm_at_top_level(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"keda_llm"}


def test_every_module_of_every_part_is_in_the_wheel(wheel: Path) -> None:
    """pyproject lists the packages: a new subpackage left off the list fails here, not in a user's install."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for package, folder in _package_dir().items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts or (folder == "keda_llm" and rel.parts[0] in _package_dir()):
                continue
            expected.add("/".join([*package.split("."), *rel.parts]))
    assert expected - names == set()
    assert any(n.endswith("simulator/workload/data/azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz") for n in names)
    assert "keda_llm/scaler/py.typed" in names


def test_bare_part_names_do_not_import_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    probe = ("import importlib.util as u, keda_llm.common.durations as d; "
             "print(d.__file__); print([n for n in ('scaler', 'exporter', 'simulator', 'common') if u.find_spec(n)])")
    out = subprocess.run([str(python), "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True)
    installed, bare = out.stdout.splitlines()
    assert "site-packages" in installed and str(ROOT) not in installed
    assert bare == "[]"
    failed = subprocess.run([str(python), "-c", "import scaler"], cwd=tmp_path, capture_output=True, text=True)
    assert failed.returncode != 0 and "ModuleNotFoundError" in failed.stderr


def _bare_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in PART_FOLDERS]
    return bad


def test_nothing_in_the_repository_imports_a_part_by_its_folder_name() -> None:
    bad = [hit for rel in _tracked_files() if rel.endswith(".py") for hit in _bare_imports(ROOT / rel)]
    assert bad == []


def test_the_wheel_carries_the_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(metadata).decode()
        assert "License-Expression: Apache-2.0" in text
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in zf.namelist())
