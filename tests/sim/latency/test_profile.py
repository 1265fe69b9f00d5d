"""The profile file (`sim.latency.profile.Profile`): a round trip, and a corrupt file's field named."""
from __future__ import annotations

import json

import pytest
from profile_factories import make_profile, plan, seq

from policies import ConfigError
from sim.latency.profile import Profile
from sim.latency.profiled import ProfiledLatencyModel


def test_profile_round_trips_through_its_file(tmp_path):
    p = make_profile()
    path = p.save(tmp_path / "p.json")
    q = Profile.load(path)
    assert q.to_dict() == p.to_dict()
    pl = plan(seq("a", 1, 100), seq("c", 64, 0))
    assert ProfiledLatencyModel(q).step_time(pl) == ProfiledLatencyModel(p).step_time(pl)


@pytest.mark.parametrize("corrupt, field", [
    (lambda d: d.pop("ops"), "profile.ops"),
    (lambda d: d["ops"].pop("qkv_proj"), "profile.ops"),
    (lambda d: d["ops"]["qkv_proj"]["curve"].update(kind="spline"), "profile.ops.qkv_proj.curve.kind"),
    (lambda d: d["ops"]["attn_decode"].update(curve={"kind": "pwl", "x": [1], "y": [1]}),
     "profile.ops.attn_decode.curve.kind"),
    (lambda d: d["ops"]["attn_decode"].update(curve={"kind": "grid", "x": [1, 2], "y": [1, 2], "z": [[1, 2]]}),
     "profile.ops.attn_decode.curve"),
    (lambda d: d["ops"]["qkv_proj"]["curve"].update(x=[3, 2]), "profile.ops.qkv_proj.curve"),
    (lambda d: d["ops"]["attn_decode"].update(inputs=["num_tokens"]), "profile.ops.attn_decode.inputs"),
    (lambda d: d["model"].update(hidden_size="big"), "profile.model.hidden_size"),
    (lambda d: d["model"].update(mlp_kind="swiglu"), "profile.model.mlp_kind"),
    (lambda d: d["model"].update(position_embedding="alibi"), "profile.model.position_embedding"),
    (lambda d: d.update(format="other"), "profile.format"),
    (lambda d: d.update(version=99), "profile.version"),
])
def test_a_corrupt_profile_names_the_field(tmp_path, corrupt, field):
    d = make_profile().to_dict()
    corrupt(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ConfigError) as exc:
        Profile.load(path)
    assert str(exc.value).startswith(field)


def test_a_truncated_file_is_a_clear_error(tmp_path):
    path = make_profile().save(tmp_path / "p.json")
    path.write_text(path.read_text()[:200])
    with pytest.raises(ConfigError, match="^profile: .* not valid JSON"):
        Profile.load(path)


def test_measured_max_reads_the_points_else_the_curves_last_knots():
    from sim.latency.curves import Grid2D, PiecewiseLinear

    p = make_profile()
    p.ops["qkv_proj"].points = [[1, 1e-6], [512, 2e-5], [64, 5e-6]]
    assert p.measured_max("qkv_proj") == (512.0,)
    assert p.measured_max("o_proj") == (1001.0,)  # no points: the curve's last knot
    p.ops["attn_prefill"].curve = Grid2D((16.0, 256.0), (0.0, 1024.0), ((1.0, 2.0), (3.0, 4.0)), y_minus_x=True)
    assert p.measured_max("attn_prefill") == (256.0, 1280.0)  # chunk, and context with the chunk in it
    assert p.measured_max("attn_decode") is None  # a bare formula (Bilinear) bounds nothing
    del p.ops["swap_in"]
    assert p.measured_max("swap_in") is None
    assert isinstance(p.ops["lm_head"].curve, PiecewiseLinear)
