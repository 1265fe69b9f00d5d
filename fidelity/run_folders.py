"""Which source a folder of real runs comes from, and its runs in the common form (`RealRun`).

A folder with `exp-config.yaml` is a vLLM server run (`fidelity.sources.vllm_server`), one with
`vllm/meta.json` + `vllm/requests.jsonl` an LLMServingSim replay (`fidelity.sources.llmservingsim`),
and `vllm-N-RATE.exp` files are DistServe's vLLM runs (`fidelity.sources.distserve`).
"""
from __future__ import annotations

from pathlib import Path

from fidelity.runs import RealRun
from fidelity.sources.distserve import DISTSERVE_RUN_NAME, load_distserve_run
from fidelity.sources.llmservingsim import load_llmservingsim_run
from fidelity.sources.vllm_server import load_server_run

#: what `find_runs` recognises, for the commands' help and errors
FOLDER_HELP = "folder of real runs (e.g. ../shared/data/groundtruth), one run folder or one DistServe vllm-N-RATE.exp"
LAYOUTS = "exp-config.yaml folders, LLMServingSim vllm/requests.jsonl or DistServe vllm-N-RATE.exp files"


def find_runs(root: Path) -> list[RealRun]:
    """Every run under `root`, in a stable order (a run folder itself, or one DistServe run file, is
    accepted too)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such folder")
    if root.is_file():  # one run file: DistServe's, or refused with what it is
        return [load_distserve_run(root)]
    runs: list[RealRun] = []
    for d in sorted([root, *[p for p in root.rglob("*") if p.is_dir()]]):
        if (d / "exp-config.yaml").is_file():
            source = d.parent.name if d != root else "vllm-server"
            runs.append(load_server_run(d, source=source))
        elif (d / "vllm" / "requests.jsonl").is_file() and (d / "vllm" / "meta.json").is_file():
            runs.append(load_llmservingsim_run(d))
        elif not d.name.endswith("-workload"):  # DistServe's measured files (its inputs sit in *-workload)
            runs.extend(load_distserve_run(f) for f in sorted(d.glob("vllm-*.exp")) if DISTSERVE_RUN_NAME.match(f.name))
    return runs
