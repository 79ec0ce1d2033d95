"""The layering contract (pyproject's [tool.importlinter]) holds on the tree, and breaks on a forbidden import.

CI runs scripts/lint_imports.py; this runs the same import-linter on a link tree of the installed layout
(scripts/linktree.py) with one module replaced by a copy that imports upward or sideways."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]




def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
         str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, check=False)


def _with_import(tmp_path: Path, module: str, line: str) -> Path:
    tree = load_script("linktree").build(ROOT, tmp_path / "tree")
    path = tree / Path(*module.split("."))
    path = path.with_suffix(".py")
    text = path.read_text()
    path.unlink()
    path.write_text(text + f"\n{line}  # noqa\n")
    return tree


def test_the_tree_keeps_the_contract(tmp_path: Path) -> None:
    result = _lint(load_script("linktree").build(ROOT, tmp_path / "tree"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "importer", "imported"), [
    ("keda_llm.scaler.names", "from keda_llm.exporter import model", "scaler", "exporter"),  # sideways
    ("keda_llm.scaler.decide", "import keda_llm.simulator.run", "scaler", "simulator"),  # production -> simulator
    ("keda_llm.common.durations", "from keda_llm.scaler import names", "common", "scaler"),  # bottom -> part
    ("keda_llm.simulator.cluster.router", "from keda_llm import demo", "simulator", "demo"),  # -> the top
    ("keda_llm.simulator.workload.traces", "import keda_llm.simulator.report", "simulator.workload",
     "simulator.report"),  # the simulator's flow, upward
])
def test_a_forbidden_import_breaks_the_contract(tmp_path: Path, module: str, line: str, importer: str,
                                                imported: str) -> None:
    result = _lint(_with_import(tmp_path, module, line))
    assert result.returncode == 1
    assert f"keda_llm.{importer} is not allowed to import keda_llm.{imported}" in result.stdout
    assert f"{module} ->" in result.stdout
