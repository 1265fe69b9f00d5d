"""The shared checks of `policies.config` and the scheduler config's policy-specific knobs."""
from __future__ import annotations

import pytest

from policies import ConfigError, SchedulerConfig
from policies.config import check_int, check_number


@pytest.mark.parametrize("value, said", [
    (float("nan"), r"^f\.x: expected a number, got nan$"),  # NaN passes every bound (comparisons are false)
    (float("inf"), r"^f\.x: expected a finite number, got inf$"),
    (float("-inf"), r"^f\.x: expected a finite number, got -inf$"),
    (10**400, r"^f\.x: expected a finite number, got an integer of 401 digits$"),  # no float holds it
    ("1", r"^f\.x: expected a number, got '1'$"),
])
def test_check_number_refuses_nan_infinity_and_overflowing_integers_naming_the_field(value, said):
    with pytest.raises(ConfigError, match=said):
        check_number("f.x", value, 0.0, strict_min=True)


def test_check_number_says_the_hint_after_a_refusal_of_nan_or_infinity():
    with pytest.raises(ConfigError, match=r"^f\.x: expected a number, got nan \(leave it unset\)$"):
        check_number("f.x", float("nan"), hint="leave it unset")
    with pytest.raises(ConfigError, match=r"^f\.x: expected a finite number, got inf \(leave it unset\)$"):
        check_number("f.x", float("inf"), hint="leave it unset")
    check_number("f.x", 2, 0.0, 3.0)  # plain numbers still pass, integers too
    check_number("f.x", 10**300, 0.0)  # large, but a float holds it


def test_check_int_refuses_a_count_above_its_maximum():
    check_int("f.n", 10, 1, maximum=10)
    with pytest.raises(ConfigError, match=r"^f\.n: must be <= 10, got 11$"):
        check_int("f.n", 11, 1, maximum=10)


def test_static_max_batch_size_is_refused_under_another_policy_like_max_paddings():
    """Each knob only one policy reads is refused under the others (it used to run ignored)."""
    assert SchedulerConfig(policy="static", static_max_batch_size=4).static_max_batch_size == 4
    for policy in ("continuous", "chunked", "vllm"):
        with pytest.raises(ConfigError, match=rf"^scheduler\.static_max_batch_size: only policy 'static' .*"
                                              rf"\(policy is '{policy}'\)"):
            SchedulerConfig(policy=policy, static_max_batch_size=4)
    with pytest.raises(ConfigError, match=r"^scheduler\.max_paddings: only policy 'continuous'"):
        SchedulerConfig(policy="chunked", max_paddings=4)


def test_a_budget_below_max_num_seqs_is_refused_where_vllm_refuses_it():
    # every vLLM release (0.2.0-0.19.0) refuses max_num_batched_tokens < max_num_seqs; its engine
    # arguments first lower an unset max_num_seqs to the budget, as the preset does
    for policy in ("vllm", "continuous"):
        with pytest.raises(ConfigError, match=r"^scheduler.max_num_batched_tokens: 64 is below max_num_seqs = 128"):
            SchedulerConfig(policy=policy, max_num_batched_tokens=64, max_num_seqs=128, max_model_len=64)
    SchedulerConfig(policy="chunked", max_num_batched_tokens=64, max_num_seqs=128)  # not vLLM's: allowed
    preset = SchedulerConfig.preset("vllm", version="0.11", max_num_batched_tokens=64)
    assert preset.max_num_seqs == 64
    with pytest.raises(ConfigError, match=r"^scheduler.max_num_batched_tokens"):
        SchedulerConfig.preset("vllm", version="0.11", max_num_batched_tokens=64, max_num_seqs=65)
