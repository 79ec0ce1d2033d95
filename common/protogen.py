"""Python gRPC stubs from a .proto: the one protoc recipe for every generated package in the repo.

Each package that commits stubs (exporter/podresources_v1, scaler/externalscaler) keeps a small
script naming its proto and include root; this runs grpcio-tools' protoc for the message module,
its type stub and the service module. grpcio-tools is a dev dependency, pinned because another
version stamps different bytes into the files, so it is imported only when a stub is generated.
"""

from __future__ import annotations

from pathlib import Path


def stub_names(proto: Path) -> tuple[str, str, str]:
    """The files protoc writes for `proto`: messages, their type stub, the service."""
    stem = proto.stem
    return f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"


def protoc(include: Path, proto: Path, out_root: Path) -> list[Path]:
    """Generate the stubs of `proto` (a file below `include`) under `out_root`; returns their paths.

    The proto is passed by its include-relative name: that name is the descriptor's name in the
    default pool and, for a proto inside a package, what the service module imports its messages as.
    """
    from grpc_tools import protoc as grpc_protoc

    relative = proto.relative_to(include) if proto.is_absolute() else proto
    out_root.mkdir(parents=True, exist_ok=True)
    code = grpc_protoc.main([
        "grpc_tools.protoc",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(relative),
    ])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} for {include / relative}")
    out_dir = out_root / relative.parent
    return [out_dir / name for name in stub_names(relative)]
