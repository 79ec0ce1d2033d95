"""A folder a command will write into, checked before the work it would hold is done."""

from __future__ import annotations

import tempfile
from pathlib import Path


def writable_folder_problem(name: str) -> str | None:
    """Why `name` cannot take files (made if missing), or None. The write is tried: root passes every
    permission check, and /proc or a read-only mount refuse only the write itself."""
    d = Path(name)
    if d.exists() and not d.is_dir():
        return "a file, not a folder"
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".keda-llm-probe-"):
            pass
    except OSError as err:
        return f"cannot write there: {err.strerror or err}"
    return None
