"""mypy --strict over keda_llm as installed: `python scripts/typecheck.py` (CI runs it; plain `mypy` does not
see the package-dir mapping, see scripts/linktree.py). Paths in the report are the repository's."""

from __future__ import annotations

import subprocess
import sys

from linktree import ROOT, build, to_repo_path


def main() -> int:
    tree = build()
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "keda_llm"],
        cwd=tree, capture_output=True, text=True, check=False)
    for line in (proc.stdout + proc.stderr).splitlines():
        print(to_repo_path(line))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
