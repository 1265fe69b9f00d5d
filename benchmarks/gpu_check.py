"""The prepared GPU check (`make gpu-check`): everything the project checks on CUDA, in one run.

    python benchmarks/gpu_check.py [--out runs/gpu-check] [--wheels wheels] [--budget-s 480] [--dry-run]

For one H100/H200 with torch and triton, no network, no flash-attn, none of our other dependencies,
at most 8 minutes. Stages, each its own process under `benchmarks/offline_guard.py`, time-limited
out of the budget: env (Python, torch, device, triton; what of benchmarks/gpu_check_requirements.txt
is missing); install (those, from the wheels folder, offline, into OUT/venv, seeing this
interpreter's site directories: torch stays; later stages run on it); requirements; gpu-tests
(`pytest -m gpu`); calibrate (`servesim calibrate --device cuda --grid quick`, examples/tiny-llama);
validate-* (`servesim validate --device cuda`, examples/validate-{chunked-512,continuous}.toml).
Everything goes under `--out` (logs, JUnit file, profile, reports, each stage's imports,
`report.json` / `report.md`); exit 0 when every stage passed in the budget. `--dry-run` (or
SERVESIM_GPU_CHECK_DRY_RUN=1): the same stages on the CPU at tiny sizes (under a minute), every
distribution outside torch's and the wheels' closure refused.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "gpu_check_requirements.txt"
WORKLOADS = ("examples/validate-chunked-512.toml", "examples/validate-continuous.toml")
MODEL = "examples/tiny-llama/config.json"
#: each stage's share of the budget at most (seconds on the GPU machine), for a stage that hangs
STAGE_CAP_S = {"env": 60, "install": 120, "requirements": 60, "gpu-tests": 200, "calibrate": 120, "validate": 150}


def read_requirements(path: Path) -> list[str]:
    lines = (ln.split("#", 1)[0].strip() for ln in Path(path).read_text().splitlines())
    return [ln for ln in lines if ln]


def unsatisfied(requirements: list[str]) -> list[str]:
    """The requirements that this interpreter's path does not satisfy (name and version)."""
    import importlib.metadata as md

    try:
        from packaging.requirements import Requirement
    except ImportError:  # before the wheels are in: pip's own copy
        from pip._vendor.packaging.requirements import Requirement
    out = []
    for line in requirements:
        req = Requirement(line)
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            out.append(line)
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            out.append(line)
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_closure(names: list[str]) -> set[str]:
    """Normalised names of the distributions `names` and every one they require, transitively, as
    installed here (extras left out, markers evaluated: what pip installs with them)."""
    import importlib.metadata as md

    try:
        from packaging.markers import Marker
    except ImportError:
        from pip._vendor.packaging.markers import Marker
    seen, todo = set(), [_norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            spec, _, marker = r.partition(";")
            if marker and ("extra" in marker or not Marker(marker).evaluate()):
                continue
            todo.append(_norm(re.split(r"[ <>=!~\[(]", spec.strip(), maxsplit=1)[0]))
    return seen


def deny_list(requirements: list[str]) -> list[str]:
    """Top-level modules installed here that a machine with only torch (and its dependencies) and the
    wheels of `requirements` (and theirs) lacks: the dry run refuses them (`offline_guard`)."""
    import importlib.metadata as md

    allowed = distribution_closure([re.split(r"[ <>=!~\[;]", r, maxsplit=1)[0] for r in requirements] + ["torch"])
    out = []
    for module, dists in md.packages_distributions().items():
        if module in sys.stdlib_module_names or (REPO / module).exists():
            continue
        if not {_norm(d) for d in dists} & allowed:
            out.append(module)
    return sorted(out)


def gpu_test_files() -> list[str]:
    """Test files with tests marked `gpu` (pytest collects only these: the others need extras the GPU
    machine does not have)."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text())


# --- stages run in their own process (`--stage NAME`) -----------------------------------------------
def stage_env(args) -> int:
    import platform

    facts = {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform()}
    ok = sys.version_info >= (3, 11)
    if not ok:
        facts["error"] = f"python {facts['python']}: the project needs >= 3.11"
    try:
        import torch

        facts.update(torch=torch.__version__, cuda_available=torch.cuda.is_available(),
                     cuda=torch.version.cuda, device=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    except ImportError as exc:
        facts["torch"], ok = None, False
        facts["error"] = f"torch does not import: {exc}"
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    try:
        import flash_attn  # noqa: F401  (the guard blocks it)

        facts["flash_attn"] = "importable"
    except ImportError:
        facts["flash_attn"] = "not importable (attention falls back to torch)"
    facts["missing"] = unsatisfied(read_requirements(args.requirements))
    print(json.dumps(facts, indent=1))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "env.json").write_text(json.dumps(facts, indent=1) + "\n")
    return 0 if ok else 1


def stage_requirements(args) -> int:
    missing = unsatisfied(read_requirements(args.requirements))
    print(json.dumps({"missing": missing}))
    if missing:
        print(f"requirements: not satisfied: {', '.join(missing)} (put their wheels in --wheels)", file=sys.stderr)
    return 1 if missing else 0


def stage_cli(argv: list[str]) -> int:
    from servesim.cli import main

    return int(main(argv) or 0)


# --- the driver -------------------------------------------------------------------------------------
class Runner:
    """Runs stages as subprocesses within the budget and keeps their records for the report."""

    def __init__(self, out: Path, budget_s: float, pythonpath: list[Path], deny: Path | None = None) -> None:
        self.out, self.budget_s, self.t0 = out, budget_s, time.perf_counter()
        self.pythonpath, self.deny = pythonpath, deny
        self.stages: list[dict] = []

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def env(self, stage: str, extra: dict | None = None) -> dict:
        env = dict(os.environ, **(extra or {}))
        env["PYTHONPATH"] = os.pathsep.join([str(p) for p in self.pythonpath] + [env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
        env.update({"SERVESIM_GPU_CHECK_STAGE": stage, "SERVESIM_GPU_CHECK_IMPORTS": str(self.out / "imports"),
                    "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"})
        if self.deny is not None:
            env["SERVESIM_GPU_CHECK_DENY"] = str(self.deny)
        return env

    def run(self, stage: str, cmd: list[str], cap_s: float, env: dict | None = None) -> dict:
        timeout = min(cap_s, self.left())
        rec = {"stage": stage, "cmd": cmd, "rc": None, "seconds": 0.0, "log": f"logs/{stage}.log"}
        if timeout <= 1.0:
            rec.update(rc="skipped", note="the budget was spent")
            self.stages.append(rec)
            return rec
        log = self.out / rec["log"]
        log.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        with open(log, "w") as f:
            try:
                rec["rc"] = subprocess.run(cmd, cwd=REPO, env=self.env(stage, env), stdout=f, stderr=subprocess.STDOUT,
                                           timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rec.update(rc="timeout", note=f"stopped after {timeout:.0f} s")
        rec["seconds"] = round(time.perf_counter() - t, 1)
        print(f"gpu-check: {stage:<28} rc={rec['rc']!s:<8} {rec['seconds']:>6.1f} s   ({log.relative_to(self.out)})",
              flush=True)
        self.stages.append(rec)
        return rec


def make_venv(folder: Path) -> Path:
    """A virtual environment at `folder` (no pip of its own) whose path also holds this interpreter's
    site directories; its python. pip run from it (this interpreter's pip, found through that path)
    installs into it and counts what this interpreter has as installed."""
    import site
    import sysconfig
    import venv

    python = folder / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        ours.append(site.getusersitepackages())
    seen = []
    for d in ours:
        if d not in seen and Path(d).is_dir():
            seen.append(d)
    (Path(purelib) / "gpu_check_parent.pth").write_text("".join(f"{d}\n" for d in seen))
    return python


def me(python: str, stage: str, *rest: str) -> list[str]:
    return [python, str(Path(__file__).resolve()), "--stage", stage, *rest]


def collect(out: Path, runner: Runner, args) -> dict:
    """report.json: the stages and the figures their outputs hold."""
    figures: dict = {}
    prof = out / "profile.json"
    if prof.is_file():
        meta = json.loads(prof.read_text()).get("meta", {})
        fit = meta.get("engine_step_fit") or {}
        figures["calibrate"] = {"device": meta.get("device"), "attention_backend": meta.get("attention_backend"),
                                "calibration_s": meta.get("calibration_s"), "in_step_scale": meta.get("in_step_scale"),
                                "engine_step_fit_median_abs_pct": fit.get("median_abs_pct"),
                                "engine_step_fit_held_out_median_abs_pct": fit.get("holdout_median_abs_pct"),
                                "warnings": meta.get("warnings")}
    for wl in WORKLOADS:
        folder = out / Path(wl).stem
        if not (folder / "validation.json").is_file():
            continue
        v = json.loads((folder / "validation.json").read_text())
        d = json.loads((folder / "details.json").read_text())
        means = {k: v["metrics"][k]["mean"]["abs_pct_error"] for k in ("ttft_s", "tpot_s", "e2e_s")}
        step = v["step_time_abs_pct_error"]["median"]
        figures[Path(wl).stem] = {
            "step_median_abs_pct": step, "mean_abs_pct": means,
            "bar_met": step is not None and step <= 5.0 and all(e is not None and e <= 10.0 for e in means.values()),
            "attention_backend": (d.get("profile_meta") or {}).get("attention_backend"),
            "held_out_median_abs_pct": (d.get("engine_step_fit") or {}).get("holdout_median_abs_pct"),
            "calibration_warnings": d.get("calibration_warnings"), "num_steps": d.get("num_steps")}
    junit = out / "gpu-tests.xml"
    if junit.is_file():
        import xml.etree.ElementTree as ET

        suites = ET.parse(junit).getroot()
        suites = [suites] if suites.tag == "testsuite" else list(suites)
        figures["gpu-tests"] = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    imports: dict[str, list[str]] = {}
    for f in sorted((out / "imports").glob("*.json")):
        rec = json.loads(f.read_text())
        imports.setdefault(rec["stage"], [])
        imports[rec["stage"]] = sorted(set(imports[rec["stage"]]) | set(rec["modules"]))
    total = round(time.perf_counter() - runner.t0, 1)
    passed = all(s["rc"] == 0 for s in runner.stages) and total <= runner.budget_s
    env = json.loads((out / "env.json").read_text()) if (out / "env.json").is_file() else None
    return {"dry_run": args.dry_run, "device": args.device, "budget_s": runner.budget_s, "total_s": total,
            "passed": passed, "env": env, "stages": runner.stages, "figures": figures, "imports": imports}


def write_markdown(out: Path, report: dict) -> None:
    lines = [f"# GPU check{' (dry run on the CPU)' if report['dry_run'] else ''}", "",
             f"{'passed' if report['passed'] else 'FAILED'} in {report['total_s']} s of a {report['budget_s']:.0f} s budget",
             "", "| stage | rc | seconds | log |", "|---|---|---|---|"]
    lines += [f"| {s['stage']} | {s['rc']} | {s['seconds']} | {s['log']} |" for s in report["stages"]]
    if report.get("env"):
        lines += ["", "## env", "", "```", json.dumps(report["env"], indent=1), "```"]
    for name, fig in report["figures"].items():
        lines += ["", f"## {name}", "", "```", json.dumps(fig, indent=1), "```"]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["--stage", "cli"]:  # servesim's CLI under the guard: `--stage cli -- ARGS...`
        sys.path.insert(0, str(HERE))
        import offline_guard

        offline_guard.install()
        return stage_cli(argv[3:] if argv[2:3] == ["--"] else argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "runs" / "gpu-check"))
    ap.add_argument("--wheels", default=None, help="folder of wheels to install what is missing from (make wheels)")
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    ap.add_argument("--budget-s", type=float, default=None, help="the whole check's time limit (default 480, dry 90)")
    ap.add_argument("--dry-run", action="store_true", default=os.environ.get("SERVESIM_GPU_CHECK_DRY_RUN") == "1",
                    help="everything but the device: the CPU, tiny sizes")
    ap.add_argument("--stage", choices=("env", "requirements"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.device = "cpu" if args.dry_run else "cuda"
    if args.stage:
        sys.path.insert(0, str(HERE))
        import offline_guard

        offline_guard.install()
        return {"env": stage_env, "requirements": stage_requirements}[args.stage](args)

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in (out / "imports").glob("*.json"):
        old.unlink()
    deny = None
    if args.dry_run:  # this machine as the GPU one will be: torch, the wheels, nothing else
        deny = out / "deny.json"
        deny.write_text(json.dumps(deny_list(read_requirements(args.requirements))))
    runner = Runner(out, args.budget_s or (90.0 if args.dry_run else 480.0), [HERE, REPO], deny)
    caps = dict(STAGE_CAP_S)
    req = ["--requirements", str(args.requirements)]
    python = sys.executable
    env = runner.run("env", me(python, "env", *req, "--out", str(out)), caps["env"])
    if env["rc"] != 0:
        return finish(out, runner, args)
    need = json.loads((out / "env.json").read_text())["missing"]  # what this interpreter lacks
    wheels = Path(args.wheels).resolve() if args.wheels else None
    if wheels is not None and need:
        if not wheels.is_dir():
            print(f"--wheels: no such folder {wheels} (make wheels fills it)", file=sys.stderr)
            return 2
        python = str(make_venv(out / "venv"))
        runner.run("install", [python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                               "--disable-pip-version-check", *need], caps["install"])
    runner.run("requirements", me(python, "requirements", *req), caps["requirements"])
    if runner.stages[-1]["rc"] != 0:
        return finish(out, runner, args)
    runner.run("gpu-tests", [python, "-m", "pytest", "-p", "offline_guard", "-p", "no:cacheprovider",
                             "-o", "addopts=", "-m", "gpu", "-q", "-rA", "--junitxml", str(out / "gpu-tests.xml"),
                             *gpu_test_files()], caps["gpu-tests"],
               # only the plugins named here: the machine has none of the ones installed elsewhere
               env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    small = ["--grid", "smoke"] if args.dry_run else ["--grid", "quick"]
    runner.run("calibrate", me(python, "cli", "--", "calibrate", "--model", MODEL, "--device", args.device, *small,
                               "--out", str(out / "profile.json"), "--no-progress"), caps["calibrate"])
    for wl in WORKLOADS:
        sets = ["--set", "workload.num_requests=6"] if args.dry_run else []
        runner.run(Path(wl).stem, me(python, "cli", "--", "validate", wl, "--device", args.device, *small, *sets,
                                     "--out", str(out / Path(wl).stem), "--no-progress"), caps["validate"])
    return finish(out, runner, args)


def finish(out: Path, runner: Runner, args) -> int:
    report = collect(out, runner, args)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    write_markdown(out, report)
    print(f"gpu-check: {'passed' if report['passed'] else 'FAILED'} in {report['total_s']} s; report {out}/report.md")
    for name, fig in report["figures"].items():
        if name.startswith("validate-"):
            m = fig["mean_abs_pct"]
            print(f"  {name}: step {fig['step_median_abs_pct']:.1f}%, TTFT {m['ttft_s']:.1f}%, TPOT {m['tpot_s']:.1f}%, "
                  f"E2E {m['e2e_s']:.1f}% (attention {fig['attention_backend']})")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
