"""keda-llm: autoscale LLM inference servers on concurrency and KV-cache tokens through KEDA."""

__version__ = "0.1.0"
