"""The layering contract (pyproject's [tool.importlinter]) over keda_llm as installed:
`python scripts/lint_imports.py`. import-linter reads files through grimp, which would not see the
package-dir mapping, so it runs on the link tree of scripts/linktree.py."""

from __future__ import annotations

import os
import subprocess
import sys

from linktree import ROOT, build, to_repo_path


def main() -> int:
    tree = build()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
         str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, check=False)
    for line in (proc.stdout + proc.stderr).splitlines():
        print(to_repo_path(line))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
