"""vLLM v0's Ray serving path, counted per unit (`fidelity.ray_serving_path`)."""
from __future__ import annotations

import gc
import json
import pickle
from pathlib import Path

import pandas as pd
import pytest

from fidelity.engine_settings import MODELLED, settings_table
from fidelity.host_overhead import HostOverhead, HostOverheadLatencyModel
from fidelity.predict import source_out_prior
from fidelity.ray_serving_path import (FULL_TEXT_ENTRYPOINT, RAY_ACTOR_CALL_S, RAY_SERVING_PATH, _payloads,
                                       measure_units, serving_path_terms, write_units)
from fidelity.runs import RealRun, ServerArgs
from policies import BatchPlan, Request, ScheduledSeq


@pytest.fixture(scope="module")
def units_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ray") / "units.json"
    write_units(path, contexts=(64, 512, 2048), repeats=3, number=50)
    return path


def decode(req_id, context: int) -> ScheduledSeq:
    return ScheduledSeq(Request(req_id, arrival_time=0.0, num_prompt_tokens=context, max_tokens=8), 1, context, True,
                        False)


def v0_run(**recorded) -> RealRun:
    server = ServerArgs(model="facebook/opt-13b", gpu="A100", enable_chunked_prefill=False)
    return RealRun(name="x", source="new", path=Path("/nonexistent"), server=server, requests=pd.DataFrame(),
                   recorded_args={k: (v, "launch script") for k, v in recorded.items()})


def test_the_payloads_carry_every_context_token_as_vllm_023_sends_them():
    meta, _, output = _payloads(400)
    data = meta.seq_data[0]
    assert len(data.prompt_token_ids) + len(data.output_token_ids) == 400 == \
        len(output.prompt_token_ids) + len(output.outputs[0].token_ids)
    assert len(meta.block_tables[0]) == 400 // 16  # one block number per 16 tokens
    assert 3.5 * 400 <= len(output.prompt) + len(output.outputs[0].text) <= 4.0 * 400  # ~4 characters a token
    assert len(pickle.dumps([output])) > len(pickle.dumps([_payloads(100)[2]])) * 3


def test_each_unit_costs_more_for_a_longer_context(units_file):
    units = json.loads(units_file.read_text())["units"]
    assert set(units) == {"worker_hop", "engine_hop", "full_text_json"}
    for name, u in units.items():
        by = {int(c): s for c, s in u["seconds_by_context"].items()}
        assert by[2048] > by[512] > by[64] > 0, name
        assert u["per_context_token_s"] > 0 and u["per_request_s"] >= 0
        # at 2,048 tokens the per-token part is most of a request's cost: the payload, not the call
        assert u["per_context_token_s"] * 2048 > 0.5 * by[2048], name


def test_the_hops_a_run_records_decide_the_terms(units_file):
    units = json.loads(units_file.read_text())["units"]
    assert serving_path_terms(False, False, True, units_file) is None
    step, req, tok, why = serving_path_terms(True, True, True, units_file)
    assert step == pytest.approx(2 * RAY_ACTOR_CALL_S) and "2 actor call" in why
    assert tok == pytest.approx(sum(u["per_context_token_s"] for u in units.values()))
    engine_only = serving_path_terms(True, False, False, units_file)
    assert engine_only[0] == pytest.approx(RAY_ACTOR_CALL_S)
    assert engine_only[2] == pytest.approx(units["engine_hop"]["per_context_token_s"])
    worker_only = serving_path_terms(False, True, True, units_file)  # no engine actor: no full-text JSON counted
    assert worker_only[2] == pytest.approx(units["worker_hop"]["per_context_token_s"])
    assert serving_path_terms(True, True, True, units_file.parent / "missing.json") is None


def test_a_step_pays_the_serialization_of_every_sequences_whole_context():
    class Flat:
        def step_time(self, plan):
            return 0.01

    plan = BatchPlan(0, (decode(0, 99), decode(1, 499), decode(2, 1999)))
    model = HostOverheadLatencyModel(Flat(), HostOverhead(serialize_per_context_token_s=1e-7), record=True)
    # contexts at the end of the step: 100 + 500 + 2000
    assert model.step_time(plan) == pytest.approx(0.01 + 1e-7 * 2600)
    assert model.steps_log()["context_tokens"].tolist() == [2600]


def test_a_ray_launched_v0_run_gets_the_serving_path_and_says_so():
    if not RAY_SERVING_PATH.exists():
        pytest.skip("no measured Ray serving-path units")
    plain, _ = source_out_prior("distserve", v0_run())
    ray, evidence = source_out_prior("distserve", v0_run(engine_use_ray=True, worker_use_ray=True,
                                                         entrypoint=FULL_TEXT_ENTRYPOINT))
    assert plain.serialize_per_context_token_s == 0
    assert ray.serialize_per_context_token_s > 0
    assert ray.schedule_s == pytest.approx(plain.schedule_s + 2 * RAY_ACTOR_CALL_S)
    assert ray.schedule_per_seq_s > plain.schedule_per_seq_s
    assert any("Ray serving path" in e for e in evidence)
    # a v1 engine (chunked prefill) has no Ray actor path even if the flags were recorded
    v1 = v0_run(engine_use_ray=True)
    v1 = RealRun(**{**v1.__dict__, "server": ServerArgs(model="facebook/opt-13b", gpu="A100")})
    assert source_out_prior("aiconfigurator", v1)[0].serialize_per_context_token_s == 0


def test_the_ray_flags_are_listed_as_modelled():
    rows = {r["setting"]: r for r in settings_table(v0_run(engine_use_ray=True, worker_use_ray=True,
                                                           entrypoint=FULL_TEXT_ENTRYPOINT))}
    for name in ("engine_use_ray", "worker_use_ray", "entrypoint"):
        assert rows[name]["status"] == MODELLED and "ray_serving_path" in rows[name]["note"], name


def test_measure_units_leaves_the_collector_as_it_found_it():
    gc.disable()
    try:
        measure_units(contexts=(16, 64), repeats=1, number=2)
        assert not gc.isenabled()
    finally:
        gc.enable()
    measure_units(contexts=(16, 64), repeats=1, number=2)
    assert gc.isenabled()
