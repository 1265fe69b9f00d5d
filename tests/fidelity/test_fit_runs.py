"""`servesim calibrate fit-runs`: train/test split, the saved overhead layer, its errors."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity_helpers import make_measured_run  # noqa: E402

from fidelity import fit_runs  # noqa: E402
from fidelity.host_overhead import HostOverhead  # noqa: E402
from fidelity.run_folders import find_runs  # noqa: E402

TRUTH = HostOverhead(compute_scale=1.1, schedule_s=2e-3, sample_per_seq_s=5e-5, frontend_s=0.01)


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    for i, rate in enumerate((2.0, 5.0, 9.0, 14.0)):
        make_measured_run(root / f"run{i}", TRUTH, n=24, rate=rate, seed=i)
    return root


def cli(*argv):
    from servesim.commands import calibrate

    parser = argparse.ArgumentParser()
    calibrate.configure(parser)
    return calibrate.run(parser.parse_args(["fit-runs", *(str(a) for a in argv)]))


def test_default_split_holds_out_every_kth_run_deterministically(runs_root):
    runs = find_runs(runs_root)
    train, test = fit_runs.split_runs(runs, None, 4)
    assert [r.name for r in test] == ["run1"] and len(train) == 3
    assert fit_runs.split_runs(list(reversed(runs)), None, 4)[1][0].name == "run1"
    assert fit_runs.split_runs(runs, None, 0) == (runs, [])


def test_layer_names_its_runs_and_reports_train_and_test_error(runs_root, tmp_path):
    out = tmp_path / "overhead.json"
    assert cli(runs_root, "--out", out, "--test", runs_root / "run3", "--quiet", "--gpu-model", "roofline") == 0
    layer = json.loads(out.read_text())
    assert layer["format"] == "servesim-overhead"
    assert sorted(layer["fitted_on"]) == ["run0", "run1", "run2"] and layer["tested_on"] == ["run3"]
    assert set(layer["test_error"]["per_run"]) == {"run3"}
    assert set(layer["train_error"]["per_run"]) == {"run0", "run1", "run2"}
    # the measurements came from TRUTH: fitted terms predict the held-out run closely
    assert max(abs(e) for e in layer["test_error"]["per_run"]["run3"].values()) < 0.05
    HostOverhead.from_dict(layer["overhead"])  # a valid set of terms


def test_all_runs_in_the_test_set_is_an_error(runs_root, tmp_path):
    from policies import ConfigError

    with pytest.raises(ConfigError, match="^runs"):
        cli(runs_root / "run0", "--out", tmp_path / "x.json", "--test", runs_root / "run0", "--quiet")
