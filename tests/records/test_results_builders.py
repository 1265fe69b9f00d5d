"""The fast table builders of records.results equal the plain row-by-row constructions they replace."""
from __future__ import annotations

import math
import random
from operator import attrgetter, sub

import numpy as np
import pandas as pd
import pytest

from sim.config import load_config
from records.results import STEP_COLUMNS, max_itls, pooled_itls, request_row, requests_table, steps_table
from sim.runner import simulate


@pytest.fixture(scope="module")
def run():
    """A run with tags (classes), rejections (too long) and aborts (time limit)."""
    config = load_config({
        "model": {"name": "Llama-2-7B"},
        "hardware": {"num_gpu_blocks": 200},
        "scheduler": {"max_model_len": 1024, "queue": "priority"},
        "workload": {"kind": "poisson", "rate": 20.0, "num_requests": 120, "too_long": "keep",
                     "prompt_len": {"kind": "lognormal", "median": 200, "sigma": 1.2, "max": 2000},
                     "output_len": {"kind": "lognormal", "median": 20, "sigma": 1.0, "max": 200},
                     "classes": [{"name": "a", "priority": 0, "fraction": 0.5},
                                 {"name": "b", "priority": 1, "fraction": 0.5}]},
        "sim": {"max_sim_time_s": 4.0},
    })
    return simulate(config)


def test_requests_table_is_the_row_by_row_table(run):
    reqs = run.raw_requests
    reasons = {r.finish_reason.value for r in reqs}
    assert {"length", "rejected", "aborted"} <= reasons  # every kind of row is exercised
    rows = []
    for r in reqs:  # the reference: each request's largest gap computed on its own
        t = r.token_times
        rows.append(request_row(r, "0", max(map(sub, t[1:], t)) if len(t) > 1 else math.nan))
    pd.testing.assert_frame_equal(requests_table(reqs, {r.req_id: "0" for r in reqs}), pd.DataFrame(rows),
                                  check_exact=True)


def test_steps_table_is_the_row_by_row_table(run):
    steps = [s for s in run.steps.itertuples(index=False)]  # any objects with the fields will do
    reference = pd.DataFrame([attrgetter(*STEP_COLUMNS)(s) for s in steps], columns=list(STEP_COLUMNS))
    pd.testing.assert_frame_equal(steps_table(steps), reference, check_exact=True)
    assert steps_table([]).columns.tolist() == list(STEP_COLUMNS)


def test_pooled_itls_is_every_requests_gaps_in_order(run):
    parts = [np.diff(np.asarray(r.token_times)) for r in run.raw_requests
             if len(r.token_times) > 1 and r.finish_reason.value in ("length", "stop")]
    assert np.array_equal(pooled_itls(run.raw_requests), np.concatenate(parts))


def test_max_itls_matches_each_list_on_its_own():
    rnd = random.Random(0)
    for _ in range(300):
        lists = [sorted(rnd.random() * 10 for _ in range(rnd.choice([0, 0, 1, 1, 2, 3, rnd.randint(0, 40)])))
                 for _ in range(rnd.randint(0, 25))]
        want = [max(map(sub, t[1:], t)) if len(t) > 1 else math.nan for t in lists]
        got = max_itls(lists)
        assert len(got) == len(want)
        assert all((math.isnan(g) and math.isnan(w)) or g == w for g, w in zip(got, want))


def test_request_columns_and_itls_are_max_itls_and_pooled_itls():
    """One flattening of the token times gives what max_itls and pooled_itls give on their own
    (empty and one-token requests, unfinished and rejected ones among them)."""
    from policies import FinishReason, Request
    from records.results import request_columns_and_itls

    rnd = random.Random(1)
    for _ in range(200):
        requests = []
        for i in range(rnd.randint(1, 30)):
            r = Request(i, 0.0, 5, 50)
            r.token_times = sorted(rnd.random() * 10 for _ in range(rnd.choice([0, 0, 1, 2, rnd.randint(0, 40)])))
            r.output_token_ids = [0] * len(r.token_times)
            r.finish_reason = rnd.choice([FinishReason.LENGTH, FinishReason.STOP, FinishReason.REJECTED,
                                          FinishReason.ABORTED, None])
            requests.append(r)
        columns, itls = request_columns_and_itls(requests)
        want = max_itls([r.token_times for r in requests])
        got = columns["max_itl_s"].tolist()
        assert all((math.isnan(g) and math.isnan(w)) or g == w for g, w in zip(got, want))
        assert np.array_equal(itls, pooled_itls(requests))


def test_fast_step_rows_are_their_step_records():
    """Fast-path rows (FAST_STEP_COLUMNS, the rest at defaults), alone or mixed with StepRecords, give
    the columns of the same steps as StepRecords."""
    from records.results import FAST_STEP_COLUMNS, StepRecord, steps_columns

    rnd = random.Random(2)
    rows = [(i, 0 if i == 0 else 0.01 * i, 0.01, rnd.choice([0, 300]), rnd.randint(0, 40), rnd.randint(1, 41),
             rnd.randint(0, 900), rnd.random(), rnd.randint(0, 5), rnd.randint(1, 41), rnd.choice(["0", "1"]))
            for i in range(500)]
    records = [StepRecord(**dict(zip(FAST_STEP_COLUMNS, r)), num_padding_tokens=0, num_swap_out_blocks=0,
                          num_swap_in_blocks=0, num_preempted=0, num_swapped=0) for r in rows]
    pairs = [(steps_columns(records), steps_columns(rows)),
             (steps_columns(records), steps_columns(rows[:200] + records[200:300] + rows[300:]))]
    records[250].num_preempted = 1  # a step the fast path never makes: the batch takes every column
    pairs.append((steps_columns(records), steps_columns(rows[:250] + records[250:251] + rows[251:])))
    for want, got in pairs:
        assert list(got) == list(want) == list(STEP_COLUMNS)
        for name in STEP_COLUMNS:
            a, b = got[name], want[name]
            assert type(a) is type(b) and (np.array_equal(a, b) and a.dtype == b.dtype if isinstance(a, np.ndarray)
                                           else a == b), name
    assert pairs[2][1]["num_preempted"][250] == 1
