"""Generated Python stubs for KEDA's external scaler contract (proto/externalscaler.proto).

Do not edit the generated files by hand; regenerate them with `python -m keda_llm.scaler.externalscaler.regen`
(grpcio-tools==1.85.1, pinned in pyproject's dev extra) and commit the result. A test
(tests/scaler/test_scaler_grpc_proto.py) fails when the committed stubs differ from a fresh regeneration.
"""
