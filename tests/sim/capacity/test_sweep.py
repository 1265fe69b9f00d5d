"""Sweeps: grid/list expansion, one table with each point's config, executors agree, CLI artifacts."""
import pandas as pd
import pytest

from policies import ConfigError
from servesim.cli import main
from sim.capacity.executor import LocalExecutor, SerialExecutor, make_executor
from sim.capacity.slo import SLO
from sim.capacity.sweep import (combine, evaluate_point, expand_grid, expand_list, make_specs, parse_assignment,
                                parse_assignments, run_sweep, write_table)
from sim.config import load_config
from sim.runner import simulate
from capacity_helpers import small_config


def test_grid_crosses_and_list_zips():
    grid = expand_grid({"a.x": [1, 2], "b.y": ["u", "v", "w"]})
    assert len(grid) == 6 and grid[0] == {"a.x": 1, "b.y": "u"} and grid[-1] == {"a.x": 2, "b.y": "w"}
    zipped = expand_list({"a.x": [1, 2], "b.y": ["u", "v"]})
    assert zipped == [{"a.x": 1, "b.y": "u"}, {"a.x": 2, "b.y": "v"}]
    assert len(combine(expand_grid({"c.z": [0, 1, 2]}), zipped)) == 6
    with pytest.raises(ConfigError, match="b.y: a list sweep needs 2 values"):
        expand_list({"a.x": [1, 2], "b.y": ["u"]})
    assert parse_assignment("workload.rate=1, 2,4") == ("workload.rate", ["1", "2", "4"])
    with pytest.raises(ConfigError, match="--grid: expected KEY=V1,V2"):
        parse_assignment("workload.rate")


def test_a_point_row_is_the_simulation_of_its_config():
    """The row's metrics equal a direct simulate() of base + overrides (nothing lost in between)."""
    base = small_config()
    spec = make_specs(base, [{"workload.rate": "16", "scheduler.max_num_seqs": "32"}], SLO(0.5, 0.02))[0]
    row = evaluate_point(spec)
    direct = simulate(load_config(base, ["workload.rate=16", "scheduler.max_num_seqs=32"]))
    assert row["workload.rate"] == 16 and row["scheduler.max_num_seqs"] == 32
    assert row["ttft_s_p90"] == direct.summary["ttft_s"]["p90"]
    assert row["num_finished"] == direct.summary["num_finished"]
    ok = ((direct.requests.ttft_s <= 0.5) & ~(direct.requests.tpot_s > 0.02)).mean()
    assert row["slo_attainment"] == pytest.approx(ok)
    assert row["num_gpus"] == 1


def test_sweep_table_is_the_same_on_every_executor(tmp_path):
    base = small_config(num_requests=40)
    points = expand_grid({"workload.rate": ["4", "32"], "cluster.num_replicas": ["1", "2"]})
    serial = run_sweep(base, points, SLO(0.5, 0.02), SerialExecutor(), progress=False)
    local = run_sweep(base, points, SLO(0.5, 0.02), LocalExecutor(2), progress=False)
    pd.testing.assert_frame_equal(serial, local)
    assert list(serial["num_gpus"]) == [1, 2, 1, 2]
    # more load on one replica is slower; a second replica brings it back
    by = serial.set_index(["workload.rate", "cluster.num_replicas"])
    assert by.loc[(32, 1), "e2e_s_mean"] > by.loc[(32, 2), "e2e_s_mean"]
    paths = write_table(serial, tmp_path)
    back = pd.read_csv(paths[0])
    assert list(back["overrides"]) == list(serial["overrides"])
    if len(paths) > 1:
        pd.testing.assert_frame_equal(pd.read_parquet(paths[1]), serial)


def test_hold_window_scales_the_count_with_the_rate():
    from sim.capacity.sweep import hold_window

    base = small_config(num_requests=40, rate=8.0)
    points = hold_window(base, [{"workload.rate": "4"}, {"workload.rate": "32"}, {"scheduler.max_num_seqs": "8"},
                                {"workload.rate": "16", "workload.num_requests": "7"}])
    assert [p.get("workload.num_requests") for p in points] == ["20", "160", None, "7"]
    timed = small_config(num_requests=None, workload={"duration": 5.0})
    assert hold_window(timed, [{"workload.rate": "4"}]) == [{"workload.rate": "4"}]
    with pytest.raises(ConfigError, match="^workload.rate: expected a number, got 'abc'"):
        hold_window(base, [{"workload.rate": "abc"}])


@pytest.mark.parametrize("rate, said", [
    ("nan", r"^workload\.rate: expected a number, got nan$"),  # round() said "cannot convert float NaN"
    ("inf", r"^workload\.rate: expected a finite number, got inf$"),  # an OverflowError traceback
    ("1e300", r"^workload\.rate: 1e\+300 requests/s needs about .* requests .* at most 100,000,000"),
])
def test_hold_window_refuses_a_rate_whose_window_cannot_be_held_naming_it(rate, said):
    from sim.capacity.sweep import hold_window

    with pytest.raises(ConfigError, match=said):
        hold_window(small_config(num_requests=40, rate=8.0), [{"workload.rate": rate}])


def test_a_key_given_twice_is_refused_naming_it():
    """A second --grid of a key replaced the first's values; one in --grid and --list made a duplicate column."""
    assert parse_assignments(["a.b=1,2", "c.d=3"]) == {"a.b": ["1", "2"], "c.d": ["3"]}
    with pytest.raises(ConfigError, match=r"^--grid: workload\.rate is given twice; give each key once"):
        parse_assignments(["workload.rate=5,10", "workload.rate=20"], "--grid")
    with pytest.raises(ConfigError, match=r"^--list: workload\.rate is already swept by --grid"):
        parse_assignments(["workload.rate=20,40"], "--list", taken={"workload.rate": "--grid"})


@pytest.mark.parametrize("flags, said", [
    (["--grid", "workload.rate=5,10", "--grid", "workload.rate=20"], "--grid: workload.rate is given twice"),
    (["--grid", "workload.rate=5,10", "--list", "workload.rate=20,40"], "--list: workload.rate is already swept"),
    (["--grid", "workload.rate=5,10", "--x", "foo"], "--x: 'foo' is not swept; choose one of workload.rate"),
    (["--grid", "workload.rate=nan"], "workload.rate: expected a number, got nan"),
    (["--grid", "workload.rate=4", "--slo-ttft", "inf"], "--slo-ttft: expected a finite number, got inf (leave the "
                                                         "flag out for no target)"),
])
def test_sweep_cli_refuses_before_any_point_runs(tmp_path, capsys, flags, said):
    cfg = tmp_path / "base.toml"
    cfg.write_text(TOML)
    rc = main(["sweep", str(cfg), *flags, "--out", str(tmp_path / "out"), "--executor", "serial", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"servesim sweep: error: {said}"), err
    assert not (tmp_path / "out").exists()


def test_sweep_cli_says_why_no_plot_when_x_is_not_numeric(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    cfg = tmp_path / "base.toml"
    cfg.write_text(TOML.replace("num_requests = 30", "num_requests = 8"))
    rc = main(["sweep", str(cfg), "--grid", "hardware.gpu=H100-SXM,H200", "--out", str(tmp_path / "out"),
               "--executor", "serial", "--no-progress", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0 and not (tmp_path / "out" / "sweep.png").exists()
    assert err == ["warning: sweep.png not written: hardware.gpu's values are not numbers; plot along a numeric "
                   "key with --x (or give --no-plot)"], err


def test_unknown_executor_names_the_choices():
    with pytest.raises(ConfigError, match="executor: 'dask'.*local, serial, ray"):
        make_executor("dask")


def test_sweep_cli_writes_table_config_and_plot(tmp_path, capsys):
    import tomllib

    cfg = tmp_path / "base.toml"
    cfg.write_text(TOML)
    out = tmp_path / "out"
    rc = main(["sweep", str(cfg), "--grid", "workload.rate=4,16,64", "--list", "cluster.num_replicas=1,2",
               "--out", str(out), "--executor", "serial", "--no-progress"])
    assert rc == 0
    table = pd.read_csv(out / "sweep.csv")
    assert len(table) == 6 and {"workload.rate", "cluster.num_replicas", "overrides"} <= set(table.columns)
    assert list(table["num_requests"]) == list(30 * table["workload.rate"] // 4)  # the same 7.5 s window
    assert (out / "base_config.toml").exists() and tomllib.loads((out / "base_config.toml").read_text())
    try:
        import matplotlib  # noqa: F401

        assert (out / "sweep.png").stat().st_size > 10_000
    except ImportError:
        pass
    assert "slo_attainment" in capsys.readouterr().out


def test_sweep_cli_bad_key_is_one_line_exit_2(tmp_path, capsys):
    cfg = tmp_path / "base.toml"
    cfg.write_text(TOML)
    rc = main(["sweep", str(cfg), "--grid", "scheduler.max_num_seq=1,2", "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "scheduler.max_num_seq" in err[0]


TOML = """
[model]
name = "Llama-3-8B"
[hardware]
gpu = "H100-SXM"
[workload]
rate = 4.0
num_requests = 30
prompt_len = { kind = "uniform", low = 100, high = 800 }
output_len = { kind = "uniform", low = 20, high = 120 }
[slo]
ttft_s = 0.5
tpot_s = 0.02
"""


def test_python_values_of_a_point_are_set_as_toml_not_their_repr():
    """A dict is an inline table (its repr was re-read as a string); None and a dict of points are
    refused naming them."""
    base = small_config(num_requests=20)
    table = run_sweep(base, [{"workload.output_len": {"kind": "constant", "value": 7}}], SLO(ttft_s=1.0),
                      executor=SerialExecutor(), progress=False)
    assert table["num_finished"].iloc[0] == 20
    assert table["throughput_output_tokens_per_s"].iloc[0] > 0
    with pytest.raises(ConfigError, match=r"^hardware\.num_gpu_blocks: None is no value to set"):
        run_sweep(base, [{"hardware.num_gpu_blocks": None}], SLO(ttft_s=1.0), executor=SerialExecutor(), progress=False)
    with pytest.raises(ConfigError, match=r"^points: expected a list of \{key: value\} tables"):
        run_sweep(base, {"workload.rate": 5.0}, SLO(ttft_s=1.0), executor=SerialExecutor(), progress=False)
