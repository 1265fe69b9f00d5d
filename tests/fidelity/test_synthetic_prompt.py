"""SyntheticPrompt: the replayed sources' lazy prompt is a `SyntheticTokens` with its own ids."""
from fidelity.synthetic_prompt import SyntheticPrompt, segment_token
from sim.workload.synthetic_tokens import SyntheticTokens


def test_one_prompt_type_with_the_sources_ids():
    p = SyntheticPrompt([(7, 40), (None, 3), (9, 0), (8, 50)])
    assert isinstance(p, SyntheticTokens) and len(p) == 93 and p.segments == ((7, 40), (None, 3), (8, 50))
    ids = list(p)
    assert ids[:40] == [segment_token(7, i) for i in range(40)] and ids[40:43] == [0, 0, 0]
    assert ids == p[0:93] == [p[i] for i in range(93)]
    longer = p.extended((5, 10))
    assert type(longer) is SyntheticPrompt and list(longer)[:93] == ids  # a later turn shares the earlier one
    short = longer.truncated(45)
    assert type(short) is SyntheticPrompt and list(short) == ids[:45]
