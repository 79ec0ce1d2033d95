"""KEDA external scaler: per-model history -> policy -> desired replicas, and scale to zero and back."""
