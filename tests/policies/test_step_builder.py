"""StepBuilder: the leading decodes (a slice of `running`) make the plan entries one by one would."""
from __future__ import annotations

from policies.batch_plan import ScheduledSeqs, plan_totals
from policies.step_builder import StepBuilder
from policy_factories import make_requests


def decoding(n: int):
    """`n` requests that have each computed their prompt and sampled one token (one token owed)."""
    reqs = make_requests(n, prompt=[5 + i for i in range(n)], max_tokens=9)
    for r in reqs:
        r.num_computed_tokens = r.num_prompt_tokens
        r.output_token_ids.append(0)
        r.first_scheduled_time = 0.0
    return reqs


def entries(plan):
    return [(s.req_id, s.num_tokens, s.num_computed_tokens, s.samples, s.is_padding) for s in plan.seqs]


def test_leading_decodes_and_entries_give_the_same_plan():
    a, b = decoding(6), decoding(6)
    lead = StepBuilder(100)
    lead.leading = a[:4]
    lead.budget -= 4
    for r in a[4:]:
        lead.add(r, 1)
    one_by_one = StepBuilder(100)
    for r in b:
        one_by_one.add(r, 1)
    assert lead.budget == one_by_one.budget == 94
    lead.undo(a[1])  # a preemption takes one of the leading decodes back
    one_by_one.undo(b[1])
    assert lead.budget == one_by_one.budget == 95
    plan_a, plan_b = lead.finish(7, 1.0), one_by_one.finish(7, 1.0)
    assert entries(plan_a) == entries(plan_b)
    assert isinstance(plan_a.seqs, ScheduledSeqs) and plan_a.seqs == tuple(plan_a.seqs)
    assert plan_a.totals == plan_totals(plan_b.seqs) == plan_b.totals
    assert [r.req_id for r in plan_a.sampling_requests()] == [r.req_id for r in plan_b.sampling_requests()]
    assert [s.req_id for s in plan_a.seqs] == [0, 2, 3, 4, 5]
    assert all(s.samples and s.is_decode for s in plan_a.seqs)
    assert [r.num_computed_tokens for r in a] == [r.num_computed_tokens for r in b]
    assert a[1].num_computed_tokens == a[1].num_prompt_tokens  # the undone one did not advance
    assert plan_a.num_decode_tokens == 5 and plan_a.num_tokens == 5
