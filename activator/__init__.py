"""keda-llm activator: an OpenAI-compatible reverse proxy that holds requests while a model is at zero,
wakes it through the scaler, and routes to the least-loaded ready replica (docs/activator.md).

core.py holds the rules (pure, shared with the simulator's gateway); config.py the YAML and flags;
endpoints.py and loads.py the inputs (static list or EndpointSlices, exporter metrics); proxy.py the
aiohttp server; cli.py the `keda-llm activator` command.
"""
