"""`SimResult` and how a run that has ended becomes one: tabulated in memory, or closed and written.

An in-memory run's recorder becomes the requests and steps tables and the summary (`tabulate`); a
streamed run's recorder is closed, its summary, config echo (and replica counts, timeline) written
next to the tables it streamed (`finish_run`). Shared by one replica and a cluster.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from policies import Request
from records.metrics import completed_output_tokens, summarize
from records.files import write_summary
from records.results import Recorder, pooled_itls, requests_table, steps_table, write_results
from sim.config import Config, config_to_toml
from sim.cost import replica_costs, run_cost

if TYPE_CHECKING:  # pandas on demand: a streamed CLI run never imports pandas (start-up)
    import pandas as pd


class SimResult:
    """What one simulation produced: the two tables, the summary and the resolved config.

    An in-memory run holds its tables (and `raw_requests`, the Request objects). A streamed run
    (`simulate(..., out=DIR)` or `stream=True`) holds only the summary; with an `out_dir` its
    `requests` / `steps` are read back from the files written there on first access.
    """

    def __init__(self, requests: "pd.DataFrame | None", steps: "pd.DataFrame | None", summary: dict,
                 config: Config, raw_requests: list[Request] | None = None, replicas: "pd.DataFrame | None" = None,
                 out_dir: Path | None = None) -> None:
        self._tables = {"requests": requests, "steps": steps}
        self.summary = summary
        self.config = config
        self.raw_requests = raw_requests if raw_requests is not None else []
        self.replicas = replicas  # with autoscaling: the replica counts over time
        self.out_dir = out_dir
        self.streamed = requests is None
        self.sketched_metrics: list[str] = []  # streamed: metrics whose percentiles come from a sketch

    def __repr__(self) -> str:
        return f"SimResult(num_requests={self.summary.get('num_requests')}, streamed={self.streamed})"

    @property
    def requests(self) -> "pd.DataFrame":
        return self._table("requests")

    @property
    def steps(self) -> "pd.DataFrame":
        return self._table("steps")

    def _table(self, name: str) -> "pd.DataFrame":
        table = self._tables[name]
        if table is None:
            table = self._tables[name] = read_table(self.out_dir, name)
        return table

    def save(self, out_dir: str | Path, plot: bool = True) -> Path:
        """Write summary.json, requests.csv, steps.csv and config.toml (+ parquet, timeline.png;
        replicas.csv with autoscaling).

        A streamed result has its files already: they are copied (without a plot it did not make).
        """
        if self.streamed:
            if self.out_dir is None:
                raise ValueError("save: this run was streamed without an out directory; its tables were not "
                                 "kept (simulate(config, out=DIR) writes them as it runs)")
            out = Path(out_dir)
            if out.resolve() != self.out_dir.resolve():
                out.mkdir(parents=True, exist_ok=True)
                for path in self.out_dir.iterdir():
                    if path.is_file():
                        shutil.copy2(path, out / path.name)
            return out
        out = write_results(out_dir, self.requests, self.steps, self.summary, config_to_toml(self.config),
                            plot=plot)
        if self.replicas is not None:
            self.replicas.to_csv(Path(out) / "replicas.csv", index=False)
        return out


def read_table(out_dir: Path | None, name: str) -> "pd.DataFrame":
    """A streamed run's table from its out directory (Parquet when there, else CSV)."""
    import pandas as pd

    if out_dir is None:
        raise ValueError(f"{name}: this run was streamed without an out directory; its tables were not kept "
                         "(simulate(config, out=DIR) writes them as it runs)")
    parquet = Path(out_dir) / f"{name}.parquet"
    if parquet.is_file():
        return pd.read_parquet(parquet)
    return pd.read_csv(Path(out_dir) / f"{name}.csv", keep_default_na=False, na_values=[""])


def finish_run(recorder, config: Config, extra: dict | None = None, provisioned_s: dict | None = None,
               replicas: "pd.DataFrame | None" = None) -> SimResult:
    """The result of a run that has ended: tabulated (in memory), or closed and written (streamed).

    `extra`: summary entries a layout adds (an autoscaler's, a disaggregated cluster's KV transfer
    statistics); `provisioned_s` and `replicas`: an autoscaler's replica times and replica counts.
    """
    if isinstance(recorder, Recorder):
        result = tabulate(recorder, config, provisioned_s)
        result.summary["ttft_parts"] = config.frontend.split_ttft_parts(result.summary.get("ttft_parts"))
        result.summary.update(extra or {})
        result.replicas = replicas
        return result
    summary = recorder.close()
    summary["ttft_parts"] = config.frontend.split_ttft_parts(summary.get("ttft_parts"))
    for meter in recorder.step_meters:  # the cost meter: its keys follow summarize's, as in tabulate
        summary.update(meter.summary(summary["duration_s"], recorder.running.out_tokens,
                                     replica_costs(config, provisioned_s)))
    summary.update(extra or {})
    out = recorder.out_dir
    if out is not None:
        write_summary(out / "summary.json", summary)
        (out / "config.toml").write_text(config_to_toml(config))
        if replicas is not None:
            replicas.to_csv(out / "replicas.csv", index=False)
        if recorder.wants_plot:
            recorder.plot(out / "timeline.png")
    result = SimResult(None, None, summary, config, replicas=replicas, out_dir=out)
    result.sketched_metrics = recorder.sketched_metrics
    return result


def tabulate(recorder: Recorder, config: Config, provisioned_s: dict[str, float] | None = None) -> SimResult:
    """Turn a recorder into the result tables and summary (`provisioned_s`: an autoscaler's replica times)."""
    requests = requests_table(recorder.requests, recorder.replica_of)
    steps = steps_table(recorder.steps)
    summary = summarize(requests, steps, pooled_itls(recorder.requests), config.slo)
    summary.update(run_cost(replica_costs(config, provisioned_s), steps, summary["duration_s"],
                            completed_output_tokens(requests)))
    return SimResult(requests, steps, summary, config, recorder.requests)
