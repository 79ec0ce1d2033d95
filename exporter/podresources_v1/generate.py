"""Regenerate the committed gRPC stubs from the vendored kubelet `api.proto`.

Run from anywhere: `python -m keda_llm.exporter.podresources_v1.generate`. The proto is staged in a
temporary include root at its installed package path, `keda_llm/exporter/podresources_v1/api.proto`,
so the descriptor carries that name (no clash with another project's `api.proto` in the default
descriptor pool) and the generated `api_pb2_grpc` imports `keda_llm.exporter.podresources_v1.api_pb2`:
the repository folder (`exporter/`) is not the import path, so protoc is never pointed at it.
Needs `grpcio-tools` (a dev dependency, pinned: another version gives different bytes).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from keda_llm.common.protogen import protoc, stub_names

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_PATH = Path("keda_llm", "exporter", "podresources_v1")
PROTO = PACKAGE_DIR / "api.proto"
GENERATED = stub_names(PROTO)


def generate(out_dir: Path) -> list[Path]:
    """Write the stubs into `out_dir` (flat, as they sit in this package) and return their paths."""
    with tempfile.TemporaryDirectory() as tmp:
        include = Path(tmp) / "include"
        staged = include / PACKAGE_PATH / PROTO.name
        staged.parent.mkdir(parents=True)
        shutil.copyfile(PROTO, staged)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for path in protoc(include, staged, Path(tmp) / "out"):
            target = out_dir / path.name
            shutil.copyfile(path, target)
            written.append(target)
    return written


def main() -> int:
    for path in generate(PACKAGE_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
