"""Times vLLM v0's Ray serving path per unit (`fidelity.ray_serving_path`) and prints the figures.

    python benchmarks/ray_serving_path.py            # print the units, per request and per context token
    python benchmarks/ray_serving_path.py --write    # also write fidelity/host/vllm-v0-ray-serving-path.json

Run it on a quiet machine (it times on one thread and keeps the best of several repeats); the
JSON it writes is what `reproduce --fit source` adds to a v0 run recorded with `--engine-use-ray`
or `--worker-use-ray`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fidelity.ray_serving_path import RAY_SERVING_PATH, measure_units, write_units  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {RAY_SERVING_PATH.name} (fidelity/host/)")
    ap.add_argument("--repeats", type=int, default=7, help="best of this many timings per unit (default 7)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        print(f"--repeats: must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    units = write_units(repeats=args.repeats)["units"] if args.write else measure_units(repeats=args.repeats)
    print(f"{'unit':<16}{'per request':>14}{'per context token':>20}")
    for name, u in units.items():
        print(f"{name:<16}{u['per_request_s'] * 1e6:>11.2f} us{u['per_context_token_s'] * 1e9:>17.2f} ns")
    if args.write:
        print(f"wrote {RAY_SERVING_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
