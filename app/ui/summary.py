"""Summary cards and tables from a `summary.json` dict."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from records.display import ms, number
from records.metrics import rejection_example


def _ms(block: dict | None, key: str) -> str:
    """Milliseconds, short enough for a card (3 significant digits, thousands separated)."""
    return ms(block.get(key)) if block else "-"


def saturation_message(summary: dict) -> str | None:
    """The saturation warning's text, or None when the offered load was sustained."""
    if not summary.get("saturated"):
        return None
    sustainable = summary.get("sustainable_rate")
    if sustainable is None:
        return "Saturated: queues grew through the run; the latency figures describe a growing backlog."
    return (f"Saturated: the offered {summary.get('offered_rate', 0):.3g} req/s exceeds what this "
            f"configuration sustains (about {sustainable:.3g} req/s). Queues grew through the run, so "
            "the latency figures describe a growing backlog, not a steady state.")


def rejection_messages(summary: dict) -> list[str]:
    """One line per kind of rejection (records.metrics.rejected_reasons): how many, and why."""
    return [f"{number(kind['count'])} rejected: {rejection_example(kind)}"
            for kind in summary.get("rejected_reasons") or ()]


def load_banner(summary: dict) -> None:
    """Say out loud when the offered load exceeded what the configuration sustains."""
    message = saturation_message(summary)
    if message:
        st.warning(message)


def cost_cards(summary: dict) -> None:
    """Cost and energy per output token, GPU-hours."""
    c = st.columns(3)
    per_m = summary.get("cost_per_million_output_tokens")
    joules = summary.get("energy_j_per_output_token")
    c[0].metric("Cost per 1M output tokens", "-" if per_m is None else f"${per_m:,.3g}")
    c[1].metric("Energy per output token", "-" if joules is None else f"{joules:.3g} J")
    c[2].metric("GPU-hours", f"{summary.get('gpu_hours', 0):.3g}")


def cards(summary: dict) -> None:
    """Headline figures as metric cards (and a warning when the run was saturated)."""
    load_banner(summary)
    thr = summary.get("throughput", {})
    c = st.columns(4)
    c[0].metric("TTFT p50 / p99 (ms)", f"{_ms(summary.get('ttft_s'), 'p50')} / {_ms(summary.get('ttft_s'), 'p99')}")
    c[1].metric("TPOT p50 / p99 (ms)", f"{_ms(summary.get('tpot_s'), 'p50')} / {_ms(summary.get('tpot_s'), 'p99')}")
    c[2].metric("E2E p50 / p99 (ms)", f"{_ms(summary.get('e2e_s'), 'p50')} / {_ms(summary.get('e2e_s'), 'p99')}")
    c[3].metric("Output tokens/s", number(thr.get("output_tokens_per_s", 0)))
    c = st.columns(4)
    c[0].metric("Requests/s", number(thr.get("requests_per_s", 0)))
    c[1].metric("Goodput (req/s in SLO)", number(summary.get("goodput_requests_per_s")))
    c[2].metric("Preemptions", number(summary.get("num_preemptions", 0)))
    c[3].metric("Finished / rejected", f"{number(summary.get('num_finished', 0))} / "
                f"{number(summary.get('num_rejected', 0))}")
    for line in rejection_messages(summary):  # why, by kind
        st.warning(line)


def comparison_table(summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per configuration with the figures people compare."""
    rows = []
    for label, s in summaries.items():
        thr = s.get("throughput", {})
        rows.append({
            "config": label,
            "finished": s.get("num_finished", 0),
            "rejected": s.get("num_rejected", 0),
            "saturated": bool(s.get("saturated")),
            "output tok/s": round(thr.get("output_tokens_per_s", 0.0), 1),
            "req/s": round(thr.get("requests_per_s", 0.0), 3),
            "TTFT mean (ms)": _num(s.get("ttft_s"), "mean"),
            "TTFT p99 (ms)": _num(s.get("ttft_s"), "p99"),
            "TPOT mean (ms)": _num(s.get("tpot_s"), "mean"),
            "TPOT p99 (ms)": _num(s.get("tpot_s"), "p99"),
            "E2E p99 (ms)": _num(s.get("e2e_s"), "p99"),
            "max stall (ms)": None if s.get("max_stall_s") is None else round(s["max_stall_s"] * 1000, 1),
            "goodput (req/s)": s.get("goodput_requests_per_s"),
            "preemptions": s.get("num_preemptions", 0),
        })
    return pd.DataFrame(rows)


def _num(block: dict | None, key: str) -> float | None:
    if not block or block.get(key) is None:
        return None
    return round(block[key] * 1000, 2)
