"""Synchronization bytes of TensAIR's spoke-to-spoke exchange against the parameter server
(BSP, TAP), over the number of spokes, on the in-process kernel (the job's kernel code):
papers/000's decentralized exchange sends every update to k − 1 replicas, a parameter
server one push and one answer per spoke.

    .venv/bin/python benchmarks/tensair_bytes.py [--limit 20000] [--spokes 2 4 8]

Shuttle, the first ``--limit`` records (a fifth forecasting), the experiment's PA pipeline
(:func:`flink_jobs.experiment.run_local`); one row per protocol and spoke count:
prequential accuracy, bytes to hubs, bytes to spokes (TensAIR: spoke to spoke), rounds or
updates, records/s; the centralized learner's accuracy first.
"""

from __future__ import annotations

import argparse

from flink_jobs.experiment import run_centralized, run_local

RUNS = (("Synchronous", None, {}), ("Asynchronous", None, {}),
        ("TensAIR", "maxGradBuffer 1", {"maxGradBuffer": 1}),
        ("TensAIR", "maxGradBuffer 4", {"maxGradBuffer": 4}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=20_000, help="Shuttle records (default 20,000)")
    p.add_argument("--spokes", type=int, nargs="+", default=[2, 4, 8], help="spoke counts")
    args = p.parse_args(argv)
    c = run_centralized("shuttle", limit=args.limit)
    print(f"centralized prequential accuracy {c['prequential_accuracy']:.4f}")
    print(f"{'spokes':>6} {'protocol':<28} {'accuracy':>8} {'bytes→hubs':>11} "
          f"{'bytes→spokes':>12} {'rounds':>6} {'records/s':>9}")
    for k in args.spokes:
        for protocol, variant, extra in RUNS:
            r = run_local("shuttle", protocol, variant, extra, spokes=k, limit=args.limit)
            name = protocol + (f" ({variant})" if variant else "")
            print(f"{k:>6} {name:<28} {r['prequential_accuracy']:>8.4f} {r['bytes_to_hubs']:>11,} "
                  f"{r['bytes_to_spokes']:>12,} {r['rounds']:>6} {r['records_per_second']:>9,.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
