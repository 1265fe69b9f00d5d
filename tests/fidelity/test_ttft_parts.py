"""TTFT as named parts: they sum to each request's TTFT, measured and predicted, and each names its origin."""
from __future__ import annotations

import pytest

from fidelity.ttft_parts import PARTS, measured_parts, predicted_parts, ttft_parts_table
from sim.frontend import FrontendConfig


def test_predicted_parts_sum_to_the_simulated_ttft_with_a_front_end():
    from sim.config import load_config
    from sim.runner import simulate

    fe = {"request_overhead_s": 0.004, "tokenize_s_per_token": 2e-6, "stream_overhead_s": 0.0015}
    config = load_config({"model": {"name": "Llama-2-7B"}, "hardware": {"gpu": "H100"}, "frontend": fe,
                          "workload": {"kind": "poisson", "rate": 20.0, "num_requests": 60, "seed": 1,
                                       "prompt_len": {"kind": "uniform", "low": 100, "high": 2000},
                                       "output_len": {"kind": "constant", "value": 16}}})
    req = simulate(config).requests
    parts, origins = predicted_parts(req, FrontendConfig(**fe), frontend_s=0.002, gpu_model="roofline")
    ok = req["ttft_s"].notna()
    total = parts.loc[ok, list(PARTS)].sum(axis=1).to_numpy()
    assert total == pytest.approx(req.loc[ok, "ttft_s"].to_numpy() + 0.002, abs=1e-9)  # + the host front end
    assert (parts.loc[ok, list(PARTS)] >= -1e-12).all().all()
    assert parts.loc[ok, "first_chunk_s"].eq(0.0015).all()
    assert parts.loc[ok, "api_server_s"].to_numpy() == pytest.approx(
        0.004 + 2e-6 * req.loc[ok, "num_prompt_tokens"].to_numpy() + 0.002)
    assert set(origins) == set(PARTS) and all(origins.values())
    assert "calibrate.frontend" in origins["api_server_s"] and "host prior" in origins["api_server_s"]


def test_shipped_spans_parts_sum_to_the_measured_ttft_and_the_prediction_carries_them(shared_data):
    from fidelity.predict import predict_run
    from fidelity.run_folders import find_runs

    run = next(r for r in find_runs(shared_data / "groundtruth" / "vllm-0.11-jan2026")
               if r.name == "jan20-codellama-prefill-1")
    measured, origins, view = measured_parts(run)
    assert view == "server" and set(origins) == set(PARTS)
    assert measured[list(PARTS)].sum(axis=1).to_numpy() == pytest.approx(measured["ttft_s"].to_numpy(), abs=1e-9)
    assert measured["ttft_s"].mean() == pytest.approx(run.measured()["ttft_s"], rel=1e-9)  # what report.csv scores
    pred = predict_run(run)
    ok = pred.requests["ttft_s"].notna()
    assert pred.requests.loc[ok, list(PARTS)].sum(axis=1).to_numpy() == pytest.approx(
        pred.requests.loc[ok, "ttft_s"].to_numpy(), abs=1e-9)
    table = ttft_parts_table([pred])
    assert set(table["view"]) == {"server", "client"}  # guidellm's per-request times join the spans
    for view, t in table.groupby("view"):
        t = t.set_index("part")
        assert t.loc[list(PARTS), "measured_s"].sum() == pytest.approx(t.loc["ttft_s", "measured_s"], rel=1e-6)
        assert t.loc[list(PARTS), "predicted_s"].sum() == pytest.approx(t.loc["ttft_s", "predicted_s"], rel=1e-6)
        assert t["measured_origin"].astype(bool).all() and t["predicted_origin"].astype(bool).all()
    client = table[table["view"] == "client"].set_index("part")
    assert client.loc["ttft_s", "measured_s"] > table[table["view"] == "server"].set_index("part").loc["ttft_s", "measured_s"]
    # vLLM v1 stamps QUEUED between steps: the step in flight at arrival is in the spans' api_server_s
    # (11 ms mean here with its 64-token steps; the front end alone predicts 2 ms)
    server = table[table["view"] == "server"].set_index("part")
    assert server.loc["api_server_s", "predicted_s"] == pytest.approx(server.loc["api_server_s", "measured_s"], rel=0.25)


def test_a_request_reaching_a_busy_engine_waits_for_the_step_in_flight_in_the_api_server_part():
    import pandas as pd

    from fidelity.ttft_parts import step_boundary

    steps = pd.DataFrame({"start": [1.0, 0.0, 3.0], "duration": [1.0, 0.5, 0.25]})  # any order
    assert list(step_boundary(pd.Series([0.2, 0.5, 1.0, 1.9, 2.5, 3.1]).to_numpy(), steps)) == [
        0.5, 0.5, 2.0, 2.0, 2.5, 3.25]  # a step's [start, end); idle time keeps its own
    req = pd.DataFrame({"req_id": ["a", "b", "c"], "num_prompt_tokens": [10, 10, 10],
                        "arrival_time": [0.2, 1.0, 2.5], "first_scheduled_time": [0.5, 3.0, 2.5],
                        "first_token_time": [1.5, 3.25, 2.9]})
    parts, origins = predicted_parts(req, None, steps=steps)
    assert list(parts["api_server_s"]) == pytest.approx([0.3, 1.0, 0.0])
    assert list(parts["engine_queue_s"]) == pytest.approx([0.0, 1.0, 0.0])
    assert parts[list(PARTS)].sum(axis=1).to_numpy() == pytest.approx([1.3, 2.25, 0.4])
    assert "in flight" in origins["api_server_s"] and "step boundary" in origins["engine_queue_s"]
    one_step = pd.DataFrame({"start": [0.0], "duration": [2.0]})  # its own first step: nothing waited
    own = predicted_parts(req.iloc[:1].assign(first_scheduled_time=0.2, arrival_time=0.2), None,
                          steps=one_step.assign(start=0.2))[0]
    assert own["api_server_s"].iloc[0] == 0.0


def test_inference_perf_prometheus_summary_gives_the_parts_as_means(tmp_path):
    import json

    from fidelity_helpers import write_exp_config

    from fidelity.sources.vllm_server import load_server_run
    from fidelity.ttft_parts import prometheus_parts

    folder = write_exp_config(tmp_path / "ip")
    (folder / "summary_lifecycle_metrics.json").write_text(json.dumps({"successes": {"latency": {
        "time_to_first_token": {"mean": 0.300}, "request_latency": {"mean": 2.0}}}}))
    (folder / "summary_prometheus_metrics.json").write_text(json.dumps({"successes": {
        "time_to_first_token": {"mean": 0.280}, "request_queue_time": {"mean": 0.150},
        "request_prefill_time": {"mean": 0.120}}}))
    views = dict((name, (df, origins)) for name, df, origins in prometheus_parts(load_server_run(folder)))
    assert set(views) == {"server", "client"}
    for df, origins in views.values():
        assert df[list(PARTS)].sum(axis=1).iloc[0] == pytest.approx(df["ttft_s"].iloc[0])
        assert set(origins) == set(PARTS) and all(origins.values())
    server, client = views["server"][0].iloc[0], views["client"][0].iloc[0]
    assert server["api_server_s"] == pytest.approx(0.010) and server["engine_queue_s"] == 0.150
    assert client["ttft_s"] == 0.300 and client["api_server_s"] == pytest.approx(0.030)


def parts_table(run: str, view: str, measured: dict, predicted: dict):
    import pandas as pd

    return pd.DataFrame([{"run": run, "source": "s", "view": view, "part": part,
                          "measured_s": measured.get(part, float("nan")), "predicted_s": predicted[part],
                          "measured_origin": "", "predicted_origin": ""} for part in (*PARTS, "ttft_s")])


def test_the_parts_are_drawn_per_run_measured_above_predicted(tmp_path):
    """ttft_parts.png: one panel a run; a run whose timestamps see no parts gets its measured TTFT
    as one bar. The stacked widths are the table's means (read back off the figure's bars)."""
    import pandas as pd

    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from fidelity import ttft_parts

    predicted = dict(zip(PARTS, (0.0, 0.003, 0.020, 0.080, 0.001)), ttft_s=0.104)
    table = pd.concat([
        parts_table("with-spans", "server", dict(zip(PARTS, (0.0, 0.004, 0.030, 0.090, 0.0)), ttft_s=0.124),
                    predicted),
        parts_table("client-only", "none", {"ttft_s": 0.161}, predicted)])
    saved = []
    real_close = plt.close
    try:  # keep the figure for a look at its bars
        plt.close = lambda fig=None: saved.append(fig)
        assert ttft_parts.plot_ttft_parts(table, tmp_path / "p.png") == tmp_path / "p.png"
    finally:
        plt.close = real_close
    assert (tmp_path / "p.png").stat().st_size > 5_000
    first, second = saved[0].axes[:2]

    def widths(ax, y):  # the bars drawn across height y of a panel
        return sorted(round(p.get_width(), 6) for p in ax.patches if p.get_y() < y < p.get_y() + p.get_height())
    assert widths(first, 1) == sorted([0.0, 4.0, 30.0, 90.0, 0.0])  # ms, measured parts
    assert widths(first, 0) == sorted([0.0, 3.0, 20.0, 80.0, 1.0])
    assert widths(second, 1) == [161.0]  # no parts: the whole TTFT, one bar
    real_close(saved[0])
    assert ttft_parts.plot_ttft_parts(table.iloc[:0], tmp_path / "none.png") is None
