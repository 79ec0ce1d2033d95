"""Regenerate the committed gRPC stubs from the vendored kubelet `api.proto`.

Run from anywhere: `python -m exporter.podresources_v1.generate`. The include root is the folder
that holds the `exporter` package, so the descriptor is registered as
`exporter/podresources_v1/api.proto` (no clash with another project's `api.proto` in the default
descriptor pool) and the generated `api_pb2_grpc` imports `exporter.podresources_v1.api_pb2`.
Needs `grpcio-tools` (a dev dependency, pinned: another version gives different bytes).
"""

from __future__ import annotations

import sys
from pathlib import Path

from keda_llm.protogen import protoc, stub_names

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_ROOT = PACKAGE_DIR.parent.parent
PROTO = PACKAGE_DIR / "api.proto"
GENERATED = stub_names(PROTO)


def generate(out_root: Path) -> list[Path]:
    """Write the stubs under `out_root/exporter/podresources_v1/` and return their paths."""
    return protoc(INCLUDE_ROOT, PROTO, out_root)


def main() -> int:
    for path in generate(INCLUDE_ROOT):
        print(path.relative_to(INCLUDE_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
