"""Numbers as people read them: the one formatter of the CLI's tables, the app's cards and the reports.

`number(4880.3)` is "4,880", `number(48.83)` "48.8", `number(0.04883)` "0.0488": a few significant
digits, thousands separated, never an exponent between 1e-4 and 1e15 (Python's `:.3g` printed an
E2E p99 of "4.88e+03" ms on the app's cards). `percent(0.123)` is "12.3%", `ms(0.0488)` "48.8"
(seconds shown in milliseconds). Missing values (None, NaN) are "-". Machine-read files (CSV,
JSON) keep full precision; this is for what is shown.
"""
from __future__ import annotations

import math

MISSING = "-"


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def number(v, digits: int = 3, trim: bool = False) -> str:
    """`v` with `digits` significant digits (integers in full), thousands separated; `trim` drops
    trailing zeros of the decimals ("15" rather than "15.0")."""
    if _missing(v):
        return MISSING
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu"):
        return f"{int(v):,}"
    v = float(v)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    mag = abs(v)
    if mag < 1e-4 or mag >= 1e15:
        return f"{v:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(mag)))
    text = f"{v:,.{decimals}f}"
    if trim and "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def percent(fraction) -> str:
    """A fraction as a percentage with one decimal: 0.1234 -> "12.3%", 0.04 -> "4.0%"; below
    0.1% two significant digits (0.00042 -> "0.042%")."""
    if _missing(fraction):
        return MISSING
    pct = 100.0 * float(fraction)
    if pct == 0 or abs(pct) >= 0.1 or math.isinf(pct):
        return f"{pct:,.1f}%"
    return number(pct, 2) + "%"


def slower_or_faster(pct: float) -> str:
    """A signed slow-down in % as words: 4.2 -> "4.2% slower", -3.0 -> "3.0% faster" (0 reads slower)."""
    return f"{abs(pct):.1f}% {'slower' if pct >= 0 else 'faster'}"


def ms(seconds, digits: int = 3) -> str:
    """Seconds shown as milliseconds (the unit of the latency tables)."""
    if _missing(seconds):
        return MISSING
    return number(1e3 * float(seconds), digits)


#: the columns of a benchmark table (`format_benchmarks`): (heading, row key, scale, digits)
BENCHMARK_COLUMNS = (("#", "benchmark", None, 0), ("strategy", "strategy", None, 0), ("target", "target", 1, 3),
                     ("req/s", "requests_per_s", 1, 3), ("done", "requests", None, 0), ("failed", "failed", None, 0),
                     ("TTFT ms", "ttft_mean_ms", 1, 3), ("p99", "ttft_p99_ms", 1, 3),
                     ("ITL ms", "itl_mean_ms", 1, 3), ("p99", "itl_p99_ms", 1, 3),
                     ("E2E s", "e2e_mean_s", 1, 3), ("out tok/s", "output_tokens_per_s", 1, 3))


def format_benchmarks(rows: list[dict]) -> str:
    """A load generator's benchmarks, one line each (means unless p99; target: req/s or streams)."""
    cells = [[h for h, *_ in BENCHMARK_COLUMNS]]
    for row in rows:
        cells.append([str(row[key]) if scale is None else number(row[key], digits)
                      for _, key, scale, digits in BENCHMARK_COLUMNS])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    return "benchmarks (as the client measures them)\n" + "\n".join(line.rstrip() for line in lines)
