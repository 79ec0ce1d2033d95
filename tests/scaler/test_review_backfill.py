"""Review repros: the long tier's rebuild from Prometheus (scaler/backfill.py via scaler/restore.py)."""

from __future__ import annotations

import math

import numpy as np
from httpstub import HttpStub, Request, Response, json_response

from keda_llm.scaler.model import Observation, ReplicaSample
from keda_llm.scaler.restore import LongHistoryRestorer, StoreRef
from keda_llm.scaler.service import HistoryStore

NS, MODEL = "llm", "llama"
UPSTREAM = 'sum(gateway_pending_requests{model="llama"})'
NOW = 1_800_000_000.0 - 1_800_000_000.0 % 60 + 30.0


class FakePrometheus:
    """/api/v1/query_range: every series query answers one pod at a constant value on every step; the
    activationQuery's subquery answers 4 pending requests, except that its first `flaky` calls get the
    503 that Prometheus (errorType timeout), Thanos or Mimir (unavailable) send for a transient failure."""

    def __init__(self, flaky: int) -> None:
        self.flaky = flaky
        self.upstream_calls = 0

    def __call__(self, req: Request) -> Response:
        q = req.query["query"][0]
        start, end, step = (float(req.query[k][0]) for k in ("start", "end", "step"))
        ts = [start + i * step for i in range(round((end - start) / step) + 1)]
        if q.startswith("avg_over_time(vector("):  # the scalar form of a vector query: as Prometheus answers
            return json_response(400, {"status": "error", "errorType": "bad_data", "error": 'invalid parameter '
                                       '"query": 1:15: parse error: expected type scalar in call to function '
                                       '"vector", got instant vector'})
        if "gateway_pending_requests" in q:
            self.upstream_calls += 1
            if self.upstream_calls <= self.flaky:
                return json_response(503, {"status": "error", "errorType": "timeout",
                                           "error": "query timed out in query execution"})
            value, metric = 4.0, {}
        elif q.startswith("count(count_over_time"):
            value, metric = 1.0, {}
        else:
            value, metric = 1.0, {"namespace": NS, "model": MODEL, "pod": "a"}
        return json_response(200, {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": metric, "values": [[t, str(value)] for t in ts]}]}})


def test_one_transient_error_on_the_activation_query_retries_the_rebuild_not_drops_upstream() -> None:
    """A rebuild whose upstream query gets one transient 503 (Prometheus' own query timeout, a Thanos/Mimir
    store briefly unavailable) switches to the scalar form, which a vector query can never pass, and then
    leaves the upstream term out of all 14 days; the model counts as restored, so it is never retried.
    Every other query failing the same way is retried in 30 s (restore.py): so is this one now."""
    fake = FakePrometheus(flaky=1)
    with HttpStub(fake) as prom:
        store = HistoryStore(long_days=14)
        store.ingest(Observation(NS, MODEL, NOW, (ReplicaSample("a", NOW, running=1.0, waiting=0.0),),
                                 upstream_demand=4.0))
        t = [NOW]
        restorer = LongHistoryRestorer(lambda: [StoreRef("prom", prom.url, store, lambda ns, m: UPSTREAM)],
                                       store.lock, clock=lambda: t[0])
        assert restorer.step() == 0  # the transient error fails the rebuild: retried, not restored without upstream
        assert restorer.failures == 1
        t[0] = NOW + 31.0  # past retry_s (30 s), Prometheus answering again
        assert restorer.step() == 1
        history = store.get(NS, MODEL)
        assert history is not None
        _, demand = history.minutes("demand", NOW, 3 * 86400.0)
        seen = demand[np.isfinite(demand)]
        # every rebuilt minute: the pod's running 1 + waiting 1 + the gateway's 4 pending = 6
        assert seen.size and math.isclose(float(np.median(seen)), 6.0, rel_tol=0.01), \
            f"rebuilt demand {float(np.median(seen))}: the upstream term was dropped after one transient error"
