"""`make bench`: pyscrun measured side by side with runc (or the bare interpreter),
printed as BENCH lines and written to docs/benchmarks.md with a chart."""

from __future__ import annotations

import time

from bench import cases
from bench.chart import draw
from bench.harness import QUICK, REPO, Result, Runtimes, machine

CASES = (cases.cli_ops, cases.podman_run, cases.parallel, cases.hang_rate,
         cases.stdout_throughput, cases.anchor_rss, cases.login_memory,
         cases.checkpoint_restore)


def report(results: list[Result], seconds: float) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench`{' (BENCH_QUICK=1)' if QUICK else ''} in {seconds:.0f} s on "
        f"{machine()}.",
        "",
        "Every figure is a median of interleaved runs, compared in the same run with its "
        "reference. Ratios above 1 mean pyscrun takes longer (or, for throughput and "
        "memory, moves or uses more).",
        "",
        "| benchmark | pyscrun | reference | ratio | runs | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        met = "" if r.met is None else ("yes" if r.met else "**no**")
        lines.append(f"| {r.name} | {r.median:.4g} {r.unit} | {r.ref:.4g} {r.unit} "
                     f"({r.reference}) | {r.ratio:.2f} | {r.n} | {r.target} | {met} |")
    lines += ["", "![ratios](benchmarks.png)", ""]
    return "\n".join(lines)


def main() -> int:
    started = time.monotonic()
    runtimes = Runtimes()
    results: list[Result] = []
    try:
        for case in CASES:
            for result in case(runtimes):
                print(result.line(), flush=True)
                results.append(result)
    finally:
        runtimes.close()
    docs = REPO / "docs"
    (docs / "benchmarks.md").write_text(report(results, time.monotonic() - started))
    draw(results, docs / "benchmarks.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
