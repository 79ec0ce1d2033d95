"""Trace-driven simulator of a GPU serving cluster under the KEDA+HPA control loop."""
