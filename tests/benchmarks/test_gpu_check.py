"""`benchmarks/gpu_check.py`: the GPU check's dry run on the CPU proves everything but the device.

The dry run goes through every stage the GPU machine runs (environment, the offline install from a
wheels folder, the requirement check, the `gpu` tests, a calibration, two validate runs) under the
same guard (no network, no flash-attn). What it shows: the stages work end to end; a missing
dependency is installed from wheels with pip's index off and the later stages see it; and every
module any stage imported comes from the standard library, this repository, torch and its own
dependencies, or the distributions `make wheels` downloads (benchmarks/gpu_check_requirements.txt
and what they depend on), so nothing else is needed on a machine with torch and no network.
"""
from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmark_helpers import load_benchmark

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def load_script():
    return load_benchmark("gpu_check")


def probe_wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel `gpucheck-probe` 1.0 (no network here: built by hand)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gpucheck_probe-1.0-py3-none-any.whl"
    info = "gpucheck_probe-1.0.dist-info"
    files = {"gpucheck_probe.py": "VALUE = 42\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: gpucheck-probe\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpucheck")
    probe_wheel(tmp / "wheels")
    requirements = tmp / "requirements.txt"
    requirements.write_text((REPO / "benchmarks/gpu_check_requirements.txt").read_text() + "gpucheck-probe==1.0\n")
    out = tmp / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), "--wheels", str(tmp / "wheels"),
                           "--requirements", str(requirements), "--budget-s", "900"],
                          capture_output=True, text=True, cwd=REPO, timeout=1200)
    report = json.loads((out / "report.json").read_text())
    return proc, report, out


def test_the_dry_run_passes_every_stage_of_the_gpu_check(dry_run):
    proc, report, out = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["passed"] and report["dry_run"] and report["device"] == "cpu"
    stages = [s["stage"] for s in report["stages"]]
    assert stages == ["env", "install", "requirements", "gpu-tests", "calibrate", "validate-chunked-512",
                      "validate-continuous"]
    assert all(s["rc"] == 0 for s in report["stages"]), report["stages"]
    for name in ("report.md", "profile.json", "gpu-tests.xml", "validate-chunked-512/index.html",
                 "validate-continuous/validation.json", "logs/calibrate.log"):
        assert (out / name).is_file(), name


def test_a_missing_dependency_comes_from_the_wheels_offline_and_the_stages_see_it(dry_run):
    _, report, out = dry_run
    assert report["env"]["missing"] == ["gpucheck-probe==1.0"]  # the rest is in this environment
    install = next(s for s in report["stages"] if s["stage"] == "install")
    assert "--no-index" in install["cmd"] and "--find-links" in install["cmd"]
    probe, = (out / "venv").rglob("gpucheck_probe.py")  # in the check's environment, not this one
    assert "site-packages" in str(probe)
    assert json.loads((out / "logs/requirements.log").read_text().splitlines()[0]) == {"missing": []}


def test_attention_falls_back_to_torch_and_the_gpu_tests_are_collected(dry_run):
    _, report, _ = dry_run
    assert "not importable" in report["env"]["flash_attn"]
    figures = report["figures"]
    for name in ("validate-chunked-512", "validate-continuous"):
        assert figures[name]["attention_backend"] == "torch" and figures[name]["num_steps"] > 0
        assert set(figures[name]["mean_abs_pct"]) == {"ttft_s", "tpot_s", "e2e_s"}
    assert figures["calibrate"]["attention_backend"] == "torch"
    tests = figures["gpu-tests"]
    assert tests["tests"] >= 4 and tests["failures"] == tests["errors"] == 0
    assert tests["skipped"] == tests["tests"]  # no CUDA here: every one skips, none errors on collection


def test_everything_the_stages_import_is_stdlib_repo_torch_or_the_wheels(dry_run):
    _, report, out = dry_run
    script = load_script()
    allowed = script.distribution_closure(
        [re.split(r"[<>=!~ ]", r, maxsplit=1)[0] for r in script.read_requirements(script.REQUIREMENTS)] + ["torch"])
    assert {"simpy", "scipy", "pandas", "pytest", "torch", "numpy"} <= allowed
    denied = set(json.loads((out / "deny.json").read_text()))
    assert {"hypothesis", "transformers", "matplotlib"} <= denied  # installed here, not there
    provided = md.packages_distributions()
    ours = {p.name for p in REPO.iterdir()} | {p.stem for p in (REPO / "benchmarks").glob("*.py")} | {
        p.stem for p in (REPO / "tests").rglob("*.py")}
    assert set(report["imports"]) >= {"env", "requirements", "gpu-tests", "calibrate", "validate-continuous"}
    outside = {}
    for stage, modules in report["imports"].items():
        for m in modules:
            if m in sys.stdlib_module_names or m in ours or m == "gpucheck_probe":
                continue
            dists = {re.sub(r"[-_.]+", "-", d).lower() for d in provided.get(m, [])}
            if not dists & allowed:
                outside.setdefault(stage, []).append(f"{m} ({', '.join(sorted(dists)) or 'no distribution'})")
    assert not outside, outside
    assert all(s["cmd"][0].startswith(str(out / "venv")) for s in report["stages"][2:])  # on its interpreter
    # the stages did run what the check is about (so the closure above is of the real thing)
    assert {"simpy", "scipy", "pandas", "torch", "sim", "gpu_backend"} <= set(report["imports"]["validate-continuous"])
    assert "no plot: matplotlib is not installed" in (out / "validate-continuous" / "index.html").read_text()
    assert {"scipy", "torch", "calibrate"} <= set(report["imports"]["calibrate"])
    assert {"pytest", "torch"} <= set(report["imports"]["gpu-tests"])


def test_the_guard_refuses_the_network_and_flash_attn():
    code = ("import sys, socket; sys.path.insert(0, 'benchmarks'); import offline_guard; offline_guard.install()\n"
            "try:\n    import flash_attn\nexcept ImportError:\n    print('no flash')\n"
            "s = socket.socket()\ntry:\n    s.connect(('192.0.2.1', 80))\nexcept OSError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60).stdout
    assert "no flash" in out and "no network access" in out


def test_requirements_are_checked_by_name_and_version():
    script = load_script()
    have = md.version("numpy")
    assert script.unsatisfied([f"numpy=={have}", "numpy>=1.0"]) == []
    assert script.unsatisfied(["numpy<1.0", "surely-not-installed-dist>=1"]) == ["numpy<1.0", "surely-not-installed-dist>=1"]
    assert "tests/gpu_backend/test_cuda.py" in script.gpu_test_files()
