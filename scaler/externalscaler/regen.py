"""Regenerate the committed gRPC stubs from proto/externalscaler.proto.

    python -m keda_llm.scaler.externalscaler.regen            # rewrite the stubs in this package
    python -m keda_llm.scaler.externalscaler.regen --check    # exit 1 if the committed stubs are stale

Why a script rather than a bare protoc line: grpcio-tools writes `import externalscaler_pb2` (a
top-level import), which breaks once the stubs live in a package; this rewrites it to a relative
import, the same way every time, so regeneration is byte-reproducible and testable.
The protoc call itself is keda_llm.common.protogen's, shared with exporter/podresources_v1. Needs
grpcio-tools==1.85.1 (other versions stamp a different version into the files).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from keda_llm.common.protogen import protoc, stub_names

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO_DIR = PACKAGE_DIR.parents[1] / "proto"
PROTO_NAME = "externalscaler.proto"
GENERATED = stub_names(Path(PROTO_NAME))
_TOP_LEVEL_IMPORT = b"import externalscaler_pb2 as externalscaler__pb2"
_PACKAGE_IMPORT = b"from . import externalscaler_pb2 as externalscaler__pb2"


def generate(out_dir: Path, proto_dir: Path = PROTO_DIR) -> dict[str, bytes]:
    """Run protoc into `out_dir` (keda_llm.common.protogen); return {file name: bytes} after the import fix."""
    files: dict[str, bytes] = {}
    for path in protoc(proto_dir, proto_dir / PROTO_NAME, out_dir):
        data = path.read_bytes()
        if path.name.endswith("_grpc.py"):
            data = data.replace(_TOP_LEVEL_IMPORT, _PACKAGE_IMPORT)
        files[path.name] = data
    return files


def stale_files(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Names of the committed stubs that differ from a fresh regeneration (empty when up to date)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
    return [name for name, data in fresh.items() if not (package_dir / name).is_file()
            or (package_dir / name).read_bytes() != data]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale stubs; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: {PACKAGE_DIR / name}", file=sys.stderr)
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in generate(Path(tmp)).items():
            (PACKAGE_DIR / name).write_bytes(data)
            print(f"wrote {PACKAGE_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
