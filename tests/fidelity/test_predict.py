"""Predicting a run from what it records (`fidelity.predict`): which workload drives it, and what it refuses."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from fidelity_helpers import MODEL

from fidelity.predict import predict_run, ray_path_terms, why_unpredictable
from fidelity.run_config import PROFILE_DATA_ERROR
from fidelity.runs import REQUEST_COLUMNS, RealRun, ServerArgs
from policies import ConfigError


def profile_run(profile: dict | None, **recorded) -> RealRun:
    """A run measured as means only (no per-request sends), driven by `profile`."""
    return RealRun(name="means-only", source="hand-made", path=Path("/nonexistent"), server=ServerArgs(model=MODEL),
                   requests=pd.DataFrame(columns=list(REQUEST_COLUMNS)), profile=profile,
                   summary={"ttft_s": 0.1, "e2e_s": 2.0}, recorded_args={k: (v, "exp-config.yaml") for k, v in recorded.items()})


def test_a_profile_neither_generator_reads_is_refused_as_simulate_refuses_it():
    # inference-perf's results/config.yaml with data.type random: not guidellm's "rate-type: None is not allowed"
    run = profile_run({"data": {"type": "random"}, "load": {"type": "constant", "stages": [{"rate": 1, "duration": 10}]}})
    assert why_unpredictable(run) == PROFILE_DATA_ERROR
    with pytest.raises(ConfigError, match="^profile.data: expected inference-perf's data.type: shared_prefix"):
        predict_run(run, gpu_model="roofline")


@pytest.mark.parametrize("engine, worker", [("false", "no"), (False, "0")])
def test_ray_flags_recorded_false_as_strings_add_no_ray_path(engine, worker):
    assert ray_path_terms(profile_run(None, engine_use_ray=engine, worker_use_ray=worker)) is None


def test_a_ray_flag_of_another_value_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"^engine_use_ray \(exp-config.yaml\): expected true or false, got 'ja'"):
        ray_path_terms(profile_run(None, engine_use_ray="ja"))
