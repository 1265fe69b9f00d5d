"""Sampling: greedy, temperature and top-p against their definitions; seeding; validation."""
import pytest
import torch

from gpu_backend.sampler import Sampler, generator_seed, top_p_filter
from gpu_backend.sampling_params import GREEDY, SamplingParams
from policies import ConfigError


def test_greedy_is_argmax():
    logits = torch.randn(5, 100, generator=torch.Generator().manual_seed(0))
    assert Sampler()(logits, [GREEDY] * 5, [0] * 5, [0] * 5) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("temperature", [1e-40, 1e-30, 1e-6])
def test_a_tiny_temperature_is_greedy_not_nan(temperature):
    """Logits divided by 1e-40 overflow to inf and the softmax to NaN (torch.multinomial then raises,
    and a served engine dies with it): below 1e-5 a temperature is greedy, as in vLLM."""
    logits = torch.tensor([[0.1, 2.0, 0.3, 1.9], [5.0, 1.0, 0.0, -1.0]])
    params = [SamplingParams(temperature=temperature, seed=1)] * 2
    assert Sampler()(logits, params, [1, 2], [0, 0]) == [1, 0]


def test_seeded_sampling_is_reproducible_and_depends_on_seed_and_step():
    logits = torch.zeros(1, 1000)
    p = SamplingParams(temperature=1.0)
    s = Sampler()
    draws = [s(logits, [p], [seed], [step])[0] for seed in (1, 2) for step in range(5)]
    assert draws == [s(logits, [p], [seed], [step])[0] for seed in (1, 2) for step in range(5)]
    assert len(set(draws)) > 5  # uniform over 1000 tokens: repeats would be a seeding bug


def test_negative_seeds_are_reproducible_and_their_own():
    """Any 64-bit seed, as vLLM takes it: a negative one draws the same tokens each time, other than
    its neighbours', and its generator seed is its own (modulo 2**63, -5 and 2**63 - 5 were one)."""
    logits = torch.zeros(1, 1000)
    p = SamplingParams(temperature=1.0)
    s = Sampler()
    draws = {seed: [s(logits, [p], [seed], [step])[0] for step in range(8)] for seed in (-5, -6, 5)}
    assert draws[-5] == [s(logits, [p], [-5], [step])[0] for step in range(8)]
    assert draws[-5] != draws[-6] and draws[-5] != draws[5]
    for step in (0, 3):
        seeds = [generator_seed(seed, step) for seed in (-5, 2**63 - 5, -2**63, 2**63 - 1)]
        assert len(set(seeds)) == 4 and all(0 <= g < 2**64 for g in seeds)


def test_temperature_sampling_follows_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = SamplingParams(temperature=0.5)
    n = 4000
    counts = torch.bincount(torch.tensor([Sampler()(logits, [p], [7], [i])[0] for i in range(n)]), minlength=4)
    expected = (logits[0] / 0.5).softmax(-1) * n
    # chi-square with 3 dof: 16.3 is the 0.999 quantile
    assert float(((counts - expected) ** 2 / expected).sum()) < 16.3


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = top_p_filter(logits, 0.7).isfinite().tolist()
    assert kept == [True, True, False, False]  # 0.5 < 0.7 <= 0.8
    assert top_p_filter(logits, 0.5).isfinite().tolist() == [True, False, False, False]
    assert top_p_filter(logits[[2, 0, 3, 1]], 0.7).isfinite().tolist() == [False, True, False, True]
    draws = {Sampler()(logits[None], [SamplingParams(temperature=1.0, top_p=0.7)], [3], [i])[0] for i in range(300)}
    assert draws == {0, 1}


@pytest.mark.parametrize("kw, field", [({"temperature": -1}, "sampling.temperature"),
                                       ({"top_p": 0}, "sampling.top_p"), ({"seed": 2**63}, "sampling.seed"),
                                       ({"seed": -2**63 - 1}, "sampling.seed")])
def test_bad_params_name_the_field(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}"):
        SamplingParams(**kw)
