"""The installed layout of keda_llm (each repository folder under its package) as a tree of file links.

The repository keeps a top-level folder per part (`scaler/`, `exporter/`, ...) that setuptools installs
under one import root through `package-dir` (pyproject.toml). Python imports it through the editable
install's finder, but tools that read the file system instead of importing (mypy, import-linter's
grimp) would see `scaler/` as a top-level package, or not see `keda_llm.scaler` at all. This builds
`build/linktree/keda_llm/...` from the same mapping, one symlink per file (data too, so a script can
run on the tree of another checkout), so those tools see exactly the package a wheel installs.
Rebuilt on every run: it is cheap and never stale.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "linktree"


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Every installed package -> the repository folder that holds it (pyproject's package-dir)."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    dirs: dict[str, Path] = {}
    for package in setuptools["packages"]:
        base = max((name for name in mapping if package == name or package.startswith(name + ".")), key=len)
        rest = package[len(base):].lstrip(".")
        dirs[package] = root / mapping[base] / Path(*rest.split(".")) if rest else root / mapping[base]
    return dirs


def build(root: Path = ROOT, tree: Path = TREE) -> Path:
    """(Re)build the link tree; returns the folder to put first on the tool's path."""
    if tree.exists():
        shutil.rmtree(tree)
    for package, source in package_dirs(root).items():
        target = tree / Path(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(source.iterdir()):
            if path.is_file() and path.suffix != ".pyc":
                (target / path.name).symlink_to(path)
    return tree


def to_repo_path(line: str, root: Path = ROOT) -> str:
    """Rewrite a tool's `keda_llm/scaler/x.py:3: ...` back to the repository's `scaler/x.py:3: ...`."""
    for package, source in sorted(package_dirs(root).items(), key=lambda item: -len(item[0])):
        prefix = package.replace(".", "/") + "/"
        if line.startswith(prefix):
            return source.relative_to(root).as_posix() + "/" + line[len(prefix):]
    return line


if __name__ == "__main__":
    print(build())
    sys.exit(0)
