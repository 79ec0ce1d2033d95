"""What a backtest says per policy: a summary, a terminal table, JSON, and a PNG of demand and replicas.

SLO attainment counts every request of the trace: a request meets the SLO when it was served, its TTFT
(from its arrival at the gateway, so time held there counts) is within the TTFT target, and its mean
inter-token latency (vLLM's TPOT: (finish - first token) / (tokens - 1)) is within the ITL target.
Dropped requests (gateway timeout, or too large for any replica's KV cache) miss it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from keda_llm.simulator.cluster.engine import SimResult


@dataclass(frozen=True)
class Slo:
    """Per-request targets, seconds."""

    ttft_s: float = 2.0
    itl_s: float = 0.1

    def __post_init__(self) -> None:
        if not self.ttft_s > 0:
            raise ValueError(f"SLO: ttft must be > 0 seconds, got {self.ttft_s}")
        if not self.itl_s > 0:
            raise ValueError(f"SLO: itl must be > 0 seconds, got {self.itl_s}")


@dataclass(frozen=True)
class Summary:
    policy: str
    trace: str
    mode: str
    requests: int
    served: int
    dropped: int
    slo_attainment: float  # 0-1, over all requests
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    gpu_hours: float
    gpu_hours_vs_oracle: float | None
    scale_events: int
    cold_starts: int
    zero_seconds: float
    duration_s: float
    gpu_hours_vs_bound: float | None = None  # over the lower bound on GPU-hours (simulator.report.oracle.lower_bound)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-th percentile of weighted samples (the lower of the two values at a tie), NaN when empty."""
    if len(values) == 0 or weights.sum() <= 0:
        return math.nan
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    idx = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
    return float(values[order][min(idx, len(order) - 1)])


def met_mask(ttft: np.ndarray, tpot: np.ndarray, slo: Slo) -> np.ndarray:
    """Requests that meet both targets (TPOT NaN: a one-token answer has no inter-token latency;
    TTFT inf: dropped)."""
    out: np.ndarray = (ttft <= slo.ttft_s) & (np.isnan(tpot) | (tpot <= slo.itl_s))
    return out


def summarize(result: SimResult, slo: Slo) -> Summary:
    tab = result.request_table()
    w = tab.weight
    total = float(w.sum())
    served = np.isfinite(tab.ttft_s)
    met = float(w[met_mask(tab.ttft_s, tab.tpot_s, slo)].sum())
    has_itl = served & ~np.isnan(tab.tpot_s)
    ttft, wt = tab.ttft_s[served], w[served]
    itl, wi = tab.tpot_s[has_itl], w[has_itl]
    return Summary(
        policy=result.policy, trace=result.trace, mode=result.mode, requests=round(total), served=round(wt.sum()),
        dropped=round(total - wt.sum()), slo_attainment=met / total if total else 1.0,
        ttft_p50_s=weighted_percentile(ttft, wt, 50), ttft_p90_s=weighted_percentile(ttft, wt, 90),
        ttft_p99_s=weighted_percentile(ttft, wt, 99), itl_p50_s=weighted_percentile(itl, wi, 50),
        itl_p99_s=weighted_percentile(itl, wi, 99),
        gpu_hours=result.gpu_seconds / 3600.0, gpu_hours_vs_oracle=None, scale_events=result.scale_events,
        cold_starts=result.cold_starts, zero_seconds=result.zero_seconds, duration_s=result.end_s,
    )


def with_oracle_ratio(summaries: Sequence[Summary], bound_gpu_hours: float | None = None) -> list[Summary]:
    """Fill GPU-hours / oracle's GPU-hours where an oracle run is among them, and GPU-hours / the lower bound
    when one is given (`OraclePlan.bound.gpu_hours`)."""
    out = list(summaries)
    if bound_gpu_hours is not None and bound_gpu_hours > 0:
        out = [replace(s, gpu_hours_vs_bound=s.gpu_hours / bound_gpu_hours) for s in out]
    oracle = next((s for s in out if s.policy == "oracle"), None)
    if oracle is None or oracle.gpu_hours <= 0:
        return out
    return [replace(s, gpu_hours_vs_oracle=s.gpu_hours / oracle.gpu_hours) for s in out]


def _fmt_s(v: float) -> str:
    if math.isnan(v):
        return "-"
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.1f}s"


def table_rows(summaries: Sequence[Summary]) -> tuple[list[str], list[list[str]]]:
    head = ["policy", "served", "dropped", "SLO met", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "GPU-h",
            "/ oracle", "/ bound", "scalings", "cold starts", "at zero"]
    rows = [[s.policy, f"{s.served}", f"{s.dropped}", f"{100 * s.slo_attainment:.1f}%", _fmt_s(s.ttft_p50_s),
             _fmt_s(s.ttft_p99_s), _fmt_s(s.itl_p50_s), _fmt_s(s.itl_p99_s), f"{s.gpu_hours:.2f}",
             "-" if s.gpu_hours_vs_oracle is None else f"{s.gpu_hours_vs_oracle:.2f}x",
             "-" if s.gpu_hours_vs_bound is None else f"{s.gpu_hours_vs_bound:.2f}x", f"{s.scale_events}",
             f"{s.cold_starts}", f"{s.zero_seconds / 60:.0f} min"] for s in summaries]
    return head, rows


#: The columns of the cost table when the terminal is too narrow for one (the rest go in a second).
COST_COLUMNS = ("policy", "served", "dropped", "SLO met", "GPU-h", "/ oracle", "/ bound")
#: One table needs about this many columns; narrower terminals get two tables, never cut numbers.
ONE_TABLE_WIDTH = 150


def render_table(summaries: Sequence[Summary], title: str = "", width: int = ONE_TABLE_WIDTH) -> list[Any]:
    """rich Tables to print with a rich Console: one when `width` fits it, else the cost columns (served,
    SLO, GPU-hours and their ratios) and then the latency and scaling columns, each under 100 columns."""
    from rich.table import Table

    head, rows = table_rows(summaries)
    if width >= ONE_TABLE_WIDTH:
        groups = [list(range(len(head)))]
    else:
        cost = [head.index(c) for c in COST_COLUMNS]
        groups = [cost, [0] + [i for i in range(1, len(head)) if i not in cost]]
    tables = []
    for n, group in enumerate(groups):
        table = Table(title=(title or None) if n == 0 else None)
        for i in group:
            table.add_column(head[i], justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*(row[i] for i in group))
        tables.append(table)
    return tables


def markdown_table(summaries: Sequence[Summary]) -> str:
    head, rows = table_rows(summaries)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def to_json(summaries: Sequence[Summary], config: dict[str, Any] | None = None) -> str:
    doc = {"config": config or {}, "policies": [{k: _clean(v) for k, v in asdict(s).items()} for s in summaries]}
    return json.dumps(doc, indent=2, sort_keys=False)


def plot(results: Sequence[SimResult], path: str | Path, title: str = "") -> Path:
    """One panel per policy: arrivals per second (demand) and pods ready / starting over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(results))
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.4 * n + 0.6), sharex=True, squeeze=False)
    for ax, res in zip(axes[:, 0], results, strict=False):
        tl = res.timeline
        t = np.asarray(tl.t, dtype=np.float64) / 3600.0
        if len(t) > 1:
            dt = np.diff(np.asarray(tl.t, dtype=np.float64), prepend=tl.t[0])
            dt[0] = dt[1] if len(dt) > 1 else 1.0
            rate = np.asarray(tl.arrivals, dtype=np.float64) / np.maximum(dt, 1e-9)
        else:
            rate = np.asarray(tl.arrivals, dtype=np.float64)
        ready = np.asarray(tl.ready, dtype=np.float64)
        starting = np.asarray(tl.starting, dtype=np.float64)
        ax.fill_between(t, 0, ready, step="post", color="#2b7bba", alpha=0.8, label="ready")
        ax.fill_between(t, ready, ready + starting, step="post", color="#f0a030", alpha=0.8, label="starting")
        ax.step(t, np.asarray(tl.desired, dtype=np.float64), where="post", color="#c0392b", linewidth=0.8,
                linestyle="--", label="desired")
        ax.set_ylabel("replicas")
        ax.set_title(res.policy, loc="left", fontsize=10)
        ax2 = ax.twinx()
        ax2.plot(t, rate, color="#444444", linewidth=0.6, label="arrivals/s")
        ax2.set_ylabel("requests/s")
        if ax is axes[0, 0]:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("hours")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
