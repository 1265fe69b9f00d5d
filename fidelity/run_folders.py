"""Which source a folder of real runs comes from, and its runs in the common form (`RealRun`).

A folder with `exp-config.yaml` is a vLLM server run (`fidelity.sources.vllm_server`), one with
`vllm/meta.json` + `vllm/requests.jsonl` an LLMServingSim replay (`fidelity.sources.llmservingsim`),
and `vllm-N-RATE.exp` files are DistServe's vLLM runs (`fidelity.sources.distserve`).
`measurements_not_runs` names what such a folder also holds that is not a run servesim predicts
(DistServe's own disaggregated system, Splitwise's static-batch step times), so a report can list it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from fidelity.runs import RealRun
from policies import ConfigError
from fidelity.sources.distserve import DISTSERVE_RUN_NAME, DISTSERVE_SOURCE, DISTSERVE_SYSTEM_NOTE, \
    load_distserve_run
from fidelity.sources.llmservingsim import LLMSERVINGSIM_SOURCE, load_llmservingsim_run
from fidelity.sources.vllm_server import load_server_run

#: what `find_runs` recognises, for the commands' help and errors
FOLDER_HELP = "folder of real runs (e.g. ../shared/data/groundtruth), one run folder or one DistServe vllm-N-RATE.exp"
LAYOUTS = "exp-config.yaml folders, LLMServingSim vllm/requests.jsonl or DistServe vllm-N-RATE.exp files"


def run_candidates(root: Path) -> list[tuple[str, str, Callable[[], RealRun]]]:
    """(name, source, loader) of every run under `root`, in a stable order, none loaded yet (a run
    folder itself, or one DistServe run file, is accepted too)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such folder")
    if root.is_file():  # one run file: DistServe's, or refused with what it is
        return [(root.stem, DISTSERVE_SOURCE, partial(load_distserve_run, root))]
    found = []
    for d in sorted([root, *[p for p in root.rglob("*") if p.is_dir()]]):
        if (d / "exp-config.yaml").is_file():
            source = d.parent.name if d != root else "vllm-server"
            found.append((d.name, source, partial(load_server_run, d, source=source)))
        elif (d / "vllm" / "requests.jsonl").is_file() and (d / "vllm" / "meta.json").is_file():
            found.append((f"{d.parent.name}/{d.name}", LLMSERVINGSIM_SOURCE, partial(load_llmservingsim_run, d)))
        elif not d.name.endswith("-workload"):  # DistServe's measured files (its inputs sit in *-workload)
            found += [(f.stem, DISTSERVE_SOURCE, partial(load_distserve_run, f))
                      for f in sorted(d.glob("vllm-*.exp")) if DISTSERVE_RUN_NAME.match(f.name)]
    return found


def matches(name: str, source: str, only: Sequence[str]) -> bool:
    """Whether a run is one `--only` asks for (its name or source contains one of the texts; none: all)."""
    return not only or any(t in name or t in source for t in only)


def find_runs(root: Path, only: Sequence[str] = (), unloadable: list | None = None) -> list[RealRun]:
    """Every run under `root` (`run_candidates`) whose name or source `only` names, loaded. A run that
    cannot be loaded raises, or with an `unloadable` list is appended to it as (name, source, why),
    so one damaged folder does not stop the runs beside it."""
    if isinstance(only, str):  # its letters would each match nearly every run
        raise ConfigError(f"only: expected a list of texts, got one string {only!r}; wrap it in a list")
    runs: list[RealRun] = []
    for name, source, load in run_candidates(root):
        if not matches(name, source, only):
            continue
        try:
            runs.append(load())
        except (ValueError, OSError) as exc:  # ConfigError is a ValueError; a missing file an OSError
            if unloadable is None:
                raise
            unloadable.append((name, source, str(exc)))
    return runs


def measurements_not_runs(root: Path) -> list[tuple[str, str, str]]:
    """(name, source, why) of each measurement under `root` that `find_runs` does not take: DistServe's
    runs of its own disaggregated system (`distserve-*.exp`) and Splitwise's static-batch step times.
    Their folder's name is the source, as for the runs beside them."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for d in sorted([root, *[p for p in root.rglob("*") if p.is_dir()]]):
        if d.name.endswith("-workload"):  # DistServe's inputs, not measurements
            continue
        found += [(f.stem, DISTSERVE_SOURCE, "DistServe's own disaggregated system" + DISTSERVE_SYSTEM_NOTE)
                  for f in sorted(d.glob("distserve-*.exp"))]
        if (d / "perf_model.csv").is_file() and d.name == "data":
            found.append((d.parent.name, d.parent.name, "static batches' step times, not a serving run: "
                          "benchmarks/splitwise_check.py compares the step model with them"))
    return found
