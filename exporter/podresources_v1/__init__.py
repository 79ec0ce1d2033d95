"""The kubelet pod-resources API v1 (`v1.PodResourcesLister`): vendored proto and generated stubs.

`api.proto` is upstream's file unchanged (see README.md for its source and license); the
`api_pb2*` modules are generated from it by `generate.py` and committed.
"""
