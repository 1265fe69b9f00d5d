"""The workload the benchmark client really sent, checked against the lengths the run measured.

`check_workload(run) -> WorkloadCheck | None`: for a run whose requests servesim regenerates from
the load generator's profile (inference-perf `shared_prefix`, guidellm synthetic data), the client
release the run records (or the behaviour assumed without one), the mean prompt and output lengths
of the generated requests the server accepts (prompt + max_tokens <= max_model_len, vLLM's 400
otherwise) and the means the run measured (inference-perf's `summary_lifecycle_metrics.json`
successes.prompt_len / output_len, its per-request entries, guidellm's per-request counts).

A client counts re-tokenized text, a few % off the server's count; under ignore_eos the server
generates exactly max_tokens whatever the client counts. A prompt mean outside [1/1.5, 1.5] times
the measured one is not tokenization: the evidence decides. Every inference-perf behaviour is
generated and the one closest to the measured mean is used; if even that is outside the band, the
sampled prompt lengths are scaled to the measured mean. `WorkloadCheck.lines()` says so.
"""
from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from policies import ConfigError, FinishReason
from policies.presets import DEFAULT_VLLM_VERSION, async_scheduling_default
from fidelity.engine_settings import ALIASES
from records.files import write_content_file
from fidelity.runs import RealRun, v0_engine, version_text
from fidelity.sources.guidellm import GuidellmWorkload, is_guidellm_profile
from fidelity.sources.guidellm_results import read_guidellm_requests
from fidelity.sources.inference_perf import SharedPrefixWorkload
from fidelity.sources.inference_perf_profile import LATEST_READ, CHAT_BEHAVIOURS, SharedPrefixProfile, behaviour_for
from fidelity.sources.inference_perf_results import read_inference_perf_requests, read_summary_lengths
from fidelity.sources.vllm_server import run_file
from records.yaml_file import read_yaml

BAND = 1.5  # generated / measured prompt mean beyond [1/BAND, BAND]: not tokenization noise
VERSION_KEYS = ("inference_perf_version", "client_version")  # where an exp-config.yaml records it


@dataclass
class WorkloadCheck:
    """One run's generated workload against its measured request lengths."""

    run: str
    client: str  # inference-perf, guidellm
    version: str | None
    behaviour: str  # CHAT_BEHAVIOURS for inference-perf; "synthetic" for guidellm
    basis: str  # why that behaviour: the release read, or what was assumed
    measured_from: str  # the file the measured lengths come from ("" when none)
    measured_prompt: float = math.nan
    measured_output: float = math.nan
    generated_prompt: float = math.nan
    generated_output: float = math.nan
    num_generated: int = 0
    num_over_limit: int = 0  # generated requests the server would refuse (prompt + max_tokens > max_model_len)
    prompt_scale: float = 1.0
    resolution: str = ""  # one line: what the measured lengths changed, if anything

    @property
    def prompt_ratio(self) -> float:
        return self.generated_prompt / self.measured_prompt if self.measured_prompt > 0 else math.nan

    @property
    def output_ratio(self) -> float:
        return self.generated_output / self.measured_output if self.measured_output > 0 else math.nan

    def client_section(self) -> dict:
        """The profile's `client` mapping that makes the generator send this workload."""
        out = {"behaviour": self.behaviour}
        if self.version is not None:
            out["version"] = self.version
        if self.prompt_scale != 1.0:
            out["prompt_scale"] = round(self.prompt_scale, 6)
        return out

    def lines(self) -> list[str]:
        """What the CLI prints and the report keeps: the generator chosen and the lengths compared."""
        head = f"workload: {self.client} {self.behaviour} ({self.basis})"
        if not self.num_generated and self.resolution:  # the generator refused the profile
            return [head, f"workload: {self.resolution}"]
        if not self.measured_from:
            out = [head, f"workload: generated prompt mean {self.generated_prompt:.0f} tokens, output "
                         f"{self.generated_output:.0f}; no measured request lengths to compare{self._limit_note()}"]
            if self.num_over_limit and self.version is None:  # the release decides what a session sends
                out.append("workload: the client's release was not recorded and decides what a multi-turn "
                           "session sends: set it as the profile's client.version (client.behaviour: "
                           f"{', '.join(CHAT_BEHAVIOURS)})")
            return out
        out = [head, f"workload: prompt mean generated {self.generated_prompt:.0f} vs measured "
                     f"{self.measured_prompt:.0f} tokens ({self.prompt_ratio - 1:+.1%}), output "
                     f"{self.generated_output:.0f} vs {self.measured_output:.0f} ({self.output_ratio - 1:+.1%}; "
                     f"{self.measured_from}){self._limit_note()}"]
        if self.resolution:
            out.append(f"workload: {self.resolution}")
        return out

    def _limit_note(self) -> str:
        if not self.num_over_limit:
            return ""
        return f"; {self.num_over_limit} of {self.num_generated} generated requests exceed max_model_len"

    def row(self) -> dict:
        return {"run": self.run, "client": self.client, "version": self.version or "", "behaviour": self.behaviour,
                "basis": self.basis, "measured_from": self.measured_from, "measured_prompt": self.measured_prompt,
                "generated_prompt": self.generated_prompt, "prompt_ratio": self.prompt_ratio,
                "measured_output": self.measured_output, "generated_output": self.generated_output,
                "output_ratio": self.output_ratio, "num_generated": self.num_generated,
                "num_over_limit": self.num_over_limit, "prompt_scale": self.prompt_scale,
                "resolution": self.resolution}


# --- what the run recorded -----------------------------------------------------------------------
def recorded_version(run: RealRun, client: str) -> str | None:
    """The client release the run folder records: the profile's `client.version`, exp-config's
    `inference_perf_version` / `client_version`, guidellm's report metadata."""
    client_section = (run.profile or {}).get("client")
    if isinstance(client_section, dict) and client_section.get("version") is not None:
        return version_text("profile.client.version", client_section["version"])
    exp = run.path / "exp-config.yaml"
    if exp.is_file():
        data = read_yaml(exp)
        for key in VERSION_KEYS:
            if data.get(key):
                return version_text(f"exp-config.{key}", data[key])
    if client == "guidellm" and run.path.is_dir():  # its report (any name) opens with its metadata
        key = '"guidellm_version": "'
        for report in sorted(run.path.glob("*.json")):
            with open(report, encoding="utf-8", errors="replace") as f:
                head = f.read(4096)  # no need to parse megabytes
            if key in head:
                return head.split(key, 1)[1].split('"', 1)[0]
    return None


def measured_lengths(run: RealRun) -> tuple[float, float, str]:
    """(mean prompt, mean output, file) the run measured, the client's counts first (nan, nan, "")."""
    summary = run_file(run.path, "summary_lifecycle_metrics.json", run.profile)
    lengths = read_summary_lengths(summary) if summary is not None else None
    if lengths is not None:
        return (*lengths, summary.name)
    lifecycle = run_file(run.path, "per_request_lifecycle_metrics.json", run.profile)
    if lifecycle is not None:
        df = read_inference_perf_requests(lifecycle)
        return float(df["num_prompt_tokens"].mean()), float(df["num_output_tokens"].mean()), lifecycle.name
    client = run_file(run.path, "guidellm_per_request.csv", run.profile)
    if client is not None:
        df = read_guidellm_requests(client)
        return float(df["num_prompt_tokens"].mean()), float(df["num_output_tokens"].mean()), client.name
    if run.measured_by == "guidellm" and run.measured_file is not None:  # guidellm's own report
        if len(run.requests):
            return (float(run.requests["num_prompt_tokens"].mean()), float(run.requests["num_output_tokens"].mean()),
                    run.measured_file.name)
        if run.summary.get("prompt_len", 0) > 0:  # a sampled report: its metrics' means
            return float(run.summary["prompt_len"]), float(run.summary["output_len"]), run.measured_file.name
    if run_file(run.path, "per_request_server_spans.csv", run.profile) is not None and len(run.requests):
        return (float(run.requests["num_prompt_tokens"].mean()), float(run.requests["num_output_tokens"].mean()),
                "per_request_server_spans.csv (the server's counts)")
    return math.nan, math.nan, ""


# --- what the generator sends --------------------------------------------------------------------
def generated_lengths(profile: SharedPrefixProfile, max_model_len: int | None, seed: int = 0,
                      service_s: float = 1.0) -> tuple[float, float, int, int]:
    """(mean prompt, mean output, requests, refused) of the generator's requests against a server
    that answers each in `service_s` and refuses prompt + max_tokens > max_model_len (a refused
    turn leaves its session's context as it was, as inference-perf's failure path does)."""
    wl = SharedPrefixWorkload(profile, seed=seed)
    events = [(r.arrival_time + service_s, i, r) for i, r in enumerate(wl.start())]
    heapq.heapify(events)
    k, prompts, outputs, refused = len(events), [], [], 0
    while events:
        t, _, r = heapq.heappop(events)
        over = max_model_len is not None and r.num_prompt_tokens + r.max_tokens > max_model_len
        r.output_token_ids = [] if over else [0] * r.max_tokens
        r.finish_reason = FinishReason.REJECTED if over else FinishReason.LENGTH
        if over:
            refused += 1
        else:
            prompts.append(r.num_prompt_tokens)
            outputs.append(r.max_tokens)
        for q in wl.on_finish(r, t):
            k += 1
            heapq.heappush(events, (q.arrival_time + service_s, k, q))
    n = len(prompts) + refused
    mean = (lambda v: float(np.mean(v)) if v else math.nan)
    return mean(prompts), mean(outputs), n, refused


def _inference_perf_check(run: RealRun) -> WorkloadCheck:
    base = SharedPrefixProfile.from_dict(run.profile)
    version = recorded_version(run, "inference-perf")
    client = (run.profile or {}).get("client") or {}
    if client.get("behaviour"):
        behaviour, basis = base.behaviour, "the profile's client.behaviour"
    else:
        behaviour, basis = behaviour_for(version, base.enable_multi_turn_chat)
    if run.profile_ignored:  # the client's resolved config lacks keys of profile.yaml: its release ignored them
        basis += (f"; {run.profile_file.parent.name}/{run.profile_file.name} (the config the client resolved) lacks "
                  f"profile.yaml's {', '.join(run.profile_ignored)}: that release ignored them")
    limit = run.server.max_model_len
    profile = replace(base, behaviour=behaviour, client_version=version)
    gen_p, gen_o, n, refused = generated_lengths(profile, limit)
    m_p, m_o, source = measured_lengths(run)
    check = WorkloadCheck(run.name, "inference-perf", version, behaviour, basis, source, m_p, m_o, gen_p, gen_o,
                          n, refused, profile.prompt_scale)
    if not source or not m_p > 0 or (1 / BAND <= check.prompt_ratio <= BAND):
        return check
    # far beyond tokenization: the behaviour whose prompts match the measured ones
    was = f"{behaviour}'s prompts ({gen_p:.0f} tokens) are {check.prompt_ratio:.2f}x the measured {m_p:.0f}"
    candidates = [behaviour] + [b for b in CHAT_BEHAVIOURS if b != behaviour] if base.enable_multi_turn_chat else [behaviour]
    scored = []
    for order, b in enumerate(candidates):  # equal lengths: the release's own, then CHAT_BEHAVIOURS' order
        p = replace(base, behaviour=b, client_version=version)
        g = generated_lengths(p, limit) if b != behaviour else (gen_p, gen_o, n, refused)
        if g[0] > 0:
            scored.append((round(abs(math.log(g[0] / m_p)), 9), order, b, g))
    _, _, best, (bp, bo, bn, br) = min(scored)
    check.behaviour, check.generated_prompt, check.generated_output = best, bp, bo
    check.num_generated, check.num_over_limit = bn, br
    if best != behaviour:
        check.basis = f"chosen by the measured prompt lengths; {basis}"
    if 1 / BAND <= check.prompt_ratio <= BAND:
        check.resolution = f"{was}: simulating {best} ({bp:.0f} tokens), which matches the measured lengths"
        return check
    # no behaviour matches: scale the sampled system-prompt and question lengths to the measured mean
    scale = m_p / bp
    p = replace(base, behaviour=best, client_version=version, prompt_scale=scale)
    sp, so, sn, sr = generated_lengths(p, limit)
    if sp > 0 and scale > 0:  # one correction for what the scaled prompts gain in context
        scale *= m_p / sp
        p = replace(p, prompt_scale=scale)
        sp, so, sn, sr = generated_lengths(p, limit)
    check.prompt_scale, check.generated_prompt, check.generated_output = scale, sp, so
    check.num_generated, check.num_over_limit = sn, sr
    check.resolution = (f"{was}; no release's behaviour matches: simulating {best} with prompt lengths "
                        f"x {scale:.3f} ({sp:.0f} tokens)")
    return check


def _guidellm_check(run: RealRun) -> WorkloadCheck:
    version = recorded_version(run, "guidellm")
    basis = f"guidellm {version}" if version else f"no client version recorded: assumed {CLIENT_ASSUMED['guidellm']}"
    try:
        wl = GuidellmWorkload({**(run.profile or {}), "client": {"version": version}})
    except ConfigError as exc:  # data the generator does not model (multi-turn rows): said, not fatal
        m_p, m_o, source = measured_lengths(run)
        return WorkloadCheck(run.name, "guidellm", version, "synthetic", basis, source, m_p, m_o,
                             resolution=f"not generated: {exc}" + ("; the recorded sends are replayed"
                                                                  if run.has_per_request else ""))
    n = wl.num_requests
    prompts = np.array([wl.mean_prefix_tokens + wl.prompt() for _ in range(n)], dtype=float)
    outputs = np.array([wl.output() for _ in range(n)], dtype=float)
    limit = run.server.max_model_len
    ok = prompts + outputs <= limit if limit else np.ones(n, dtype=bool)
    m_p, m_o, source = measured_lengths(run)
    return WorkloadCheck(run.name, "guidellm", version, "synthetic", basis, source, m_p, m_o,
                         float(prompts[ok].mean()) if ok.any() else math.nan,
                         float(outputs[ok].mean()) if ok.any() else math.nan, n, int((~ok).sum()))


_CHECKS: dict[tuple, WorkloadCheck | None] = {}


def check_workload(run: RealRun) -> WorkloadCheck | None:
    """The run's generated workload against its measured lengths (None: no generator profile);
    computed once per run folder (and its files' stamps), profile and limit."""
    data = (run.profile or {}).get("data")
    if not isinstance(data, dict):
        return None
    stamps = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in sorted(run.path.glob("*"))
                   if f.is_file()) if run.path.is_dir() else ()
    key = (str(run.path), run.name, json.dumps(run.profile, sort_keys=True, default=str), run.server.max_model_len,
           stamps)
    if key not in _CHECKS:
        if data.get("type") == "shared_prefix":
            _CHECKS[key] = _inference_perf_check(run)
        elif is_guidellm_profile(run.profile):
            _CHECKS[key] = _guidellm_check(run)
        else:
            _CHECKS[key] = None
    return _CHECKS[key]


def resolved_profile(run: RealRun, check: WorkloadCheck | None = None) -> dict:
    """The run's profile with the `client` section that sends what `check` chose (inference-perf)
    or names the guidellm release the run records."""
    check = check or check_workload(run)
    profile = dict(run.profile or {})
    if check is not None and check.client == "inference-perf":
        profile["client"] = check.client_section()
    elif check is not None and check.client == "guidellm":
        profile["client"] = {"version": check.version}
    return profile


def write_resolved_profile(run: RealRun, folder: str | Path, check: WorkloadCheck | None = None) -> Path:
    """`resolved_profile` as a JSON file in `folder` (named by the run and its content)."""
    text = json.dumps(resolved_profile(run, check), sort_keys=True, default=str)
    return write_content_file(folder, f"profile-{run.name}-", text.encode())


# the client whose release decides a run's workload or metric definitions (by `RealRun.measured_by`),
# and what is assumed when the run does not record it
CLIENTS = {"inference-perf": "inference-perf", "inference-perf-summary": "inference-perf", "guidellm": "guidellm",
           "distserve": "distserve"}
CLIENT_ASSUMED = {
    "inference-perf": f"inference-perf >= {LATEST_READ} (the newest release read)",
    # 0.4's behaviour, which 0.5-0.6 keep; 0.7 differs only in its default bound (10240) and 0.5.3 on
    # in a constant benchmark's rampup, neither of which a profile without a report can show
    "guidellm": "guidellm 0.4 (constant rates without 0.3's initial burst, at most 512 requests in flight "
                "as 0.4-0.6 allow, no rampup of a constant rate: 0.5.3 on)",
    "distserve": "DistServe's benchmark client at the alignment data's commit (20a1633): replayed sends, "
                 "TTFT and latency at the client",
}


def version_assumption(run: RealRun) -> str | None:
    """One line saying what is assumed for the engine and client releases the run does not record,
    and what its loader made up (`RealRun.assumed`); None when nothing is."""
    said = []
    if not run.server.engine_version and not any(n in run.recorded_args for n in ALIASES["engine_version"]):
        said.append("engine version not recorded: assumed " + (
            "a vLLM v0 engine (whole prompts, prefill-only steps, no padding cap)"
            if v0_engine(run.server) else f"vLLM {DEFAULT_VLLM_VERSION}'s limits where none is given, and its default async scheduling "
            f"({'on' if async_scheduling_default(DEFAULT_VLLM_VERSION) else 'off'})"))
    client = CLIENTS.get(run.measured_by) or ("guidellm" if is_guidellm_profile(run.profile) else None)
    if client and (client == "distserve" or recorded_version(run, client) is None):
        said.append(f"client version not recorded: assumed {CLIENT_ASSUMED[client]}")
    said.extend(run.assumed)
    return f"{run.name}: " + "; ".join(said) if said else None
