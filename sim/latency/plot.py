"""A picture of a latency model: prefill step time vs prompt length, decode step time vs batch size.

`plot_step_times({"roofline H100": model, ...}, "step_times.png")` draws any models with a
`step_time(plan)` side by side (log-log), so a roofline and a profiled model can be compared by eye.
matplotlib is imported lazily (the `calibrate` extra).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from policies import BatchPlan, Request, ScheduledSeq
from sim.latency.base import LatencyModel

PROMPT_LENS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384)
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _plan(seqs: list[tuple[int, int]]) -> BatchPlan:
    return BatchPlan(0, tuple(ScheduledSeq(Request(i, 0.0, max(n + c, 1), 8), n, c, True)
                              for i, (n, c) in enumerate(seqs)))


def step_time_curves(model: LatencyModel, decode_context: int = 1024) -> dict[str, list[tuple[int, float]]]:
    """(x, seconds) points: one prompt of x tokens; x decodes over `decode_context` tokens each."""
    return {
        "prefill": [(n, model.step_time(_plan([(n, 0)]))) for n in PROMPT_LENS],
        "decode": [(b, model.step_time(_plan([(1, decode_context - 1)] * b))) for b in BATCH_SIZES],
    }


def plot_step_times(models: Mapping[str, LatencyModel], path: str | Path, decode_context: int = 1024) -> Path:
    """Write a two-panel PNG of step times for each named model; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_p, ax_d) = plt.subplots(1, 2, figsize=(10, 4))
    for label, model in models.items():
        curves = step_time_curves(model, decode_context)
        for ax, key in ((ax_p, "prefill"), (ax_d, "decode")):
            xs, ys = zip(*curves[key])
            ax.plot(xs, [y * 1e3 for y in ys], marker="o", label=label)
    ax_p.set(xscale="log", yscale="log", xlabel="prompt tokens (one sequence)", ylabel="step time (ms)",
             title="prefill")
    ax_d.set(xscale="log", yscale="log", xlabel=f"decoding sequences ({decode_context}-token context)",
             ylabel="step time (ms)", title="decode")
    for ax in (ax_p, ax_d):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
