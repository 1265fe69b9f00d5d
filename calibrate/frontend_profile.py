"""A front-end profile on disk: its JSON (`sim.frontend` reads it) and the figure of the engine
thread's share of streaming beside it."""
from __future__ import annotations

from pathlib import Path

from records.files import write_json


def write_profile(profile: dict, path: str | Path) -> Path:
    """Write the profile as JSON to `path`, and its engine-share figure beside it (same name, .png)."""
    path = write_json(path, profile)
    if profile.get("measurements", {}).get("phases"):
        plot_engine_share(profile, path.with_suffix(".png"))
    return path


def plot_engine_share(profile: dict, path: str | Path) -> Path:
    """The engine thread's share per phase: the token interval's streamed-minus-bare extra (median and
    mean) against outputs per step, with the charged line engine_s_per_step + engine_s_per_output x outputs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases, fe = profile["measurements"]["phases"], profile["frontend"]
    xs = [ph["outputs_per_step"] for ph in phases]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(xs, [ph["extra_s_median"] * 1e3 for ph in phases], "o", label="measured extra (median, fitted)")
    ax.plot(xs, [ph["extra_s_mean"] * 1e3 for ph in phases], "o", mfc="none", label="measured extra (mean)")
    line = [0, max(xs) + 1]
    ax.plot(line, [(fe["engine_s_per_step"] + fe["engine_s_per_output"] * x) * 1e3 for x in line], "-",
            label=f"charged: {fe['engine_s_per_step'] * 1e3:.3f} + {fe['engine_s_per_output'] * 1e3:.3f} x outputs")
    ax.set_xlabel("outputs per step (concurrent streams)")
    ax.set_ylabel("token interval, streamed - bare (ms)")
    load = profile.get("metadata", {}).get("load_average_before", ["?"])[0]
    ax.set_title(f"engine thread's share of streaming ({profile['measurements']['engine']}, load {load})", fontsize=9)
    ax.set_xlim(0, max(xs) + 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
