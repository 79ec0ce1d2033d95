"""Metric sources: where the scaler's Observations come from.

- `exporters`: scrape the node exporters directly (exporters.py; the text reader is exposition.py).
- `prometheus`: PromQL over HTTP (prometheus.py; the API client is promql.py), also used for
  `activationQuery` with either source.
Both implement `common.MetricSource`: start/stop, watch/unwatch, subscribe, latest, status.
"""
