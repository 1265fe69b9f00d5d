"""A load generator's own result file in a run folder, known by its content, not its name.

`vllm bench serve --save-result` names its JSON after the backend, rate, model and date, and
guidellm after `--output-path`: neither name can be looked for. Each JSON object file of the run's
report folders is parsed once, in name order, and the first that one of `KINDS` recognizes is
the run's (`fidelity.sources.vllm_bench`, `fidelity.sources.guidellm_results`).
"""
from __future__ import annotations

import json
from pathlib import Path

from fidelity.sources.guidellm_results import is_guidellm_report
from fidelity.sources.vllm_bench import is_bench_result

#: the clients whose results are recognized, and how (the name is `RealRun.measured_by`'s)
KINDS = (("vllm-bench", is_bench_result), ("guidellm", is_guidellm_report))


def load_json_object(path: Path) -> dict | None:
    """The parsed file if it is a JSON object, else None (a JSON list is not read past its first character)."""
    try:
        with open(path, encoding="utf-8") as f:  # JSON is UTF-8 whatever the locale says
            if f.read(1) != "{":
                return None
            f.seek(0)
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def client_kind(data) -> str | None:
    """Which client's result `data` (a parsed JSON) is, or None."""
    return next((kind for kind, recognizes in KINDS if recognizes(data)), None)


def find_client_report(folders: list[Path]) -> tuple[str, Path, dict] | None:
    """(kind, file, parsed content) of the first client result among the JSON files of `folders`, or None."""
    for folder in folders:
        for file in sorted(Path(folder).glob("*.json")):
            data = load_json_object(file)
            if data is not None and (kind := client_kind(data)) is not None:
                return kind, file, data
    return None
