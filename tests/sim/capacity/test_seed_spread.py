"""The SLO search over several workload seeds: each seed's answer is that seed's own search, a
deterministic workload has no spread, a random one has, and `capacity --seeds` reports it."""
import json

import pandas as pd
import pytest

from capacity_helpers import small_config
from servesim.cli import main
from sim.capacity.executor import SerialExecutor
from sim.capacity.search import find_max_rate
from sim.capacity.slo import SLO
from sim.capacity.spread import consecutive_seeds, search_seeds

SLO_SMALL = SLO(ttft_s=0.5, tpot_s=0.02)
SEARCH = dict(start_rate=8.0, rel_tol=0.1, executor=SerialExecutor(), progress=False)
FIXED = {"kind": "constant", "prompt_len": {"kind": "constant", "value": 600},
         "output_len": {"kind": "constant", "value": 120}}


def test_each_seeds_answer_is_the_search_that_seed_gets_alone():
    base = small_config()
    spread = search_seeds(base, SLO_SMALL, [1, 2], **SEARCH)
    for seed, res in zip(spread.seeds, spread.results):
        alone = find_max_rate(small_config(workload={"seed": seed}), SLO_SMALL, **SEARCH)
        assert (res.rate, res.upper) == (alone.rate, alone.upper)
        # every probe's row but the overrides, which name the seed
        pd.testing.assert_frame_equal(res.table().drop(columns="overrides"), alone.table().drop(columns="overrides"))


def test_a_workload_the_seed_does_not_change_has_no_spread():
    spread = search_seeds(small_config(workload=FIXED), SLO_SMALL, [0, 1, 2], **SEARCH)
    assert spread.low == spread.high == spread.median > 0
    assert spread.relative_range() == (0.0, 0.0)


def test_a_random_workload_answers_differently_from_seed_to_seed():
    spread = search_seeds(small_config(), SLO_SMALL, consecutive_seeds(0, 4), **SEARCH)
    assert spread.low < spread.high
    assert spread.low <= spread.median <= spread.high
    lo, hi = spread.relative_range()
    assert lo < 0 or hi > 0


def test_seeds_are_counted_from_the_configs_own():
    assert consecutive_seeds(5, 3) == [5, 6, 7]
    with pytest.raises(ValueError, match="seeds: must be >= 1"):
        consecutive_seeds(0, 0)


def write_config(tmp_path, workload: str = 'prompt_len = { kind = "lognormal", median = 600, sigma = 0.7 }\n'):
    config = tmp_path / "c.toml"
    config.write_text('[model]\nname = "Llama-3-8B"\n[hardware]\ngpu = "H100-SXM"\n'
                      '[scheduler]\npolicy = "chunked"\nmax_num_batched_tokens = 2048\n'
                      f'[workload]\nrate = 8.0\nnum_requests = 40\nseed = 2\n{workload}')
    return config


def capacity(config, *flags) -> list[str]:
    return ["capacity", str(config), "--slo-ttft", "0.5", "--slo-tpot", "0.02", "--tol", "0.2",
            "--executor", "serial", *flags]


def test_capacity_seeds_reports_the_median_and_range_with_a_line_a_seed(tmp_path, capsys):
    config = write_config(tmp_path)
    assert main(capacity(config, "--seeds", "3", "--json", "--out", str(tmp_path / "out"))) == 0
    captured = capsys.readouterr()
    rows = pd.DataFrame(json.loads(captured.out))
    assert sorted(rows["seed"].unique()) == [2, 3, 4]  # the config's seed and the two after it
    answers = pd.read_csv(tmp_path / "out" / "answers.csv")
    assert answers["seed"].tolist() == [2, 3, 4]
    assert rows.groupby("seed")["max_sustained_rate"].first().tolist() == answers["rate"].tolist()
    progress = [x for x in captured.err.splitlines() if x.startswith("as-is: workload.seed = ")]
    assert [x.split(" (")[1].split(")")[0] for x in progress] == ["1 of 3", "2 of 3", "3 of 3"]
    line = next(x for x in captured.err.splitlines() if "the median of 3 workload seeds" in x)
    assert f"range {answers['rate'].min():.1f} - {answers['rate'].max():.1f} req/s" in line
    assert "one workload draw" not in captured.err
    # the single search of seed 3 is the second seed's
    assert main(capacity(config, "--set", "workload.seed=3", "--json", "--no-progress")) == 0
    alone = json.loads(capsys.readouterr().out)
    assert {r["max_sustained_rate"] for r in alone} == {answers["rate"][1]}


def test_capacity_says_its_answer_is_one_draw_and_how_to_get_its_spread(tmp_path, capsys):
    assert main(capacity(write_config(tmp_path), "--no-progress")) == 0
    out = capsys.readouterr().out
    assert "the answer is for one workload draw (workload.seed = 2)" in out and "--seeds N" in out


def test_capacity_refuses_fewer_than_one_seed(tmp_path, capsys):
    assert main(capacity(write_config(tmp_path), "--seeds", "0", "--quiet")) == 2
    assert capsys.readouterr().err.startswith("servesim capacity: error: --seeds: must be >= 1")
