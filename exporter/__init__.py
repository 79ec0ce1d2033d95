"""Per-node exporter: engine /metrics and NVML in, the engine-neutral llm_* vocabulary out."""
