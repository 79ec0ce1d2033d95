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

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_ROOT = PACKAGE_DIR.parent.parent
PROTO = PACKAGE_DIR / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(out_root: Path) -> list[Path]:
    """Write the stubs under `out_root/exporter/podresources_v1/` and return their paths."""
    from grpc_tools import protoc  # dev dependency: imported here so the exporter never needs it

    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{INCLUDE_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(PROTO.relative_to(INCLUDE_ROOT)),
    ]
    # protoc resolves the proto path against -I only when it is given relative to the cwd or an
    # include root; pass the include-relative name and let -I find it.
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} for {PROTO}")
    out_dir = out_root / PROTO.parent.relative_to(INCLUDE_ROOT)
    return [out_dir / name for name in GENERATED]


def main() -> int:
    for path in generate(INCLUDE_ROOT):
        print(path.relative_to(INCLUDE_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
