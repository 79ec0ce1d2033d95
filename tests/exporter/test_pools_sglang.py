"""SGLang's disaggregated modes: the queues a prefill or decode server keeps outside `num_queue_reqs`
count as waiting (exporter/engines/sglang.py), so each pool's demand includes them (scaler/pools.py)."""

from __future__ import annotations

from keda_llm.exporter.engines import normalize
from keda_llm.exporter.model import Target


def _sg(name: str, value: float, role: str, dp: str = "0", tp: str = "0") -> str:
    return (f'sglang:{name}{{dp_rank="{dp}",engine_type="{role}",model_name="m",moe_ep_rank="0",pp_rank="0",'
            f'tp_rank="{tp}"}} {value}\n')


def test_decode_server_counts_requests_waiting_for_kv_space_and_transfer() -> None:
    body = (_sg("num_running_reqs", 30, "decode") + _sg("num_queue_reqs", 1, "decode")
            + _sg("num_decode_prealloc_queue_reqs", 4, "decode") + _sg("num_decode_transfer_queue_reqs", 2, "decode"))
    (got,) = normalize(body, Target(url="u"))
    assert got.role == "decode"
    assert (got.requests_running, got.requests_waiting) == (30, 1 + 4 + 2)


def test_prefill_server_counts_its_bootstrap_queue_but_not_what_it_is_sending() -> None:
    body = (_sg("num_queue_reqs", 3, "prefill") + _sg("num_prefill_prealloc_queue_reqs", 5, "prefill")
            + _sg("num_prefill_inflight_queue_reqs", 9, "prefill"))
    (got,) = normalize(body, Target(url="u"))
    assert (got.role, got.requests_waiting) == ("prefill", 3 + 5)


def test_queues_of_dp_ranks_are_summed_and_tp_copies_taken_once() -> None:
    body = "".join(_sg("num_queue_reqs", 0, "decode", dp, tp)
                   + _sg("num_decode_transfer_queue_reqs", n, "decode", dp, tp)
                   for dp, n in (("0", 2), ("1", 5)) for tp in ("0", "1"))
    (got,) = normalize(body, Target(url="u"))
    assert got.requests_waiting == 2 + 5
