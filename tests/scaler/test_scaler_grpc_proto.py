"""The committed stubs are what proto/externalscaler.proto generates, and the wire matches KEDA's."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from keda_llm.scaler.externalscaler import externalscaler_pb2 as pb
from keda_llm.scaler.externalscaler import regen

pytest.importorskip("grpc_tools")


def test_regeneration_gives_byte_identical_stubs() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = regen.generate(Path(tmp))
    assert sorted(fresh) == sorted(regen.GENERATED)
    for name, data in fresh.items():
        stale = f"{name} is stale: run python -m keda_llm.scaler.externalscaler.regen"
        assert (regen.PACKAGE_DIR / name).read_bytes() == data, stale


def test_stubs_import_as_a_package() -> None:
    from keda_llm.scaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

    assert pb_grpc.externalscaler__pb2 is pb  # type: ignore[attr-defined]  # generated module, no __all__


# Field numbers and types as in kedacore/keda pkg/scalers/externalscaler/externalscaler.proto
# (commit 125494be45e8ea3ba1bd734a697e4a5bcd397197): (name, number, FieldDescriptor type).
_STRING, _INT64, _DOUBLE, _BOOL, _MESSAGE = 9, 3, 1, 8, 11
KEDA_MESSAGES = {
    "ScaledObjectRef": [("name", 1, _STRING), ("namespace", 2, _STRING), ("scalerMetadata", 3, _MESSAGE)],
    "IsActiveResponse": [("result", 1, _BOOL)],
    "GetMetricSpecResponse": [("metricSpecs", 1, _MESSAGE)],
    "MetricSpec": [("metricName", 1, _STRING), ("targetSize", 2, _INT64), ("targetSizeFloat", 3, _DOUBLE)],
    "GetMetricsRequest": [("scaledObjectRef", 1, _MESSAGE), ("metricName", 2, _STRING)],
    "GetMetricsResponse": [("metricValues", 1, _MESSAGE)],
    "MetricValue": [("metricName", 1, _STRING), ("metricValue", 2, _INT64), ("metricValueFloat", 3, _DOUBLE)],
}


def test_messages_and_methods_match_keda() -> None:
    fd = pb.DESCRIPTOR
    assert fd.package == "externalscaler"
    assert set(fd.message_types_by_name) == set(KEDA_MESSAGES)
    for msg, fields in KEDA_MESSAGES.items():
        got = [(f.name, f.number, f.type) for f in fd.message_types_by_name[msg].fields]
        assert got == fields, msg
    service = fd.services_by_name["ExternalScaler"]
    methods = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods}
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
        "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", True),
    }


def test_a_zero_value_is_all_default_on_the_wire() -> None:
    # KEDA falls back to the int field when the float is 0: both must say 0, and proto3 sends neither.
    assert pb.MetricValue(metricName="m", metricValue=0, metricValueFloat=0.0).SerializeToString() == b"\n\x01m"
