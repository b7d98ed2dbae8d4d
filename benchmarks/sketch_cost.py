"""Memory and time of FDA's AMS sketch (:class:`learning.protocols.fda.AmsSketch`) for
large models, as a table.

    .venv/bin/python benchmarks/sketch_cost.py [--sizes 1000000 10000000] [--precision 0.25]
                                               [--repeat 5] [--rev GIT_REV]

For each model size ``D``, with the sketch shape of :func:`~learning.protocols.fda.sketch_shape`
at ``--precision`` (ε = δ; 5 × 128 at the default 0.25):

- ``pickled``: bytes of the pickled sketch object (spokes are pickled into Flink state);
- ``build s`` and ``build peak``: the time and the tracemalloc peak of constructing it;
- ``sketch s`` and ``best s``: the median and the shortest time of sketching one dense
  float64 vector of ``D`` values (what a spoke does after every mini-batch), out of
  ``--repeat`` calls;
- ``sketch peak``: the tracemalloc peak during one such call, over what was allocated
  before it (the vector itself is not counted).

``--rev`` measures the ``AmsSketch`` of ``learning/protocols/fda.py`` at a git revision
instead of the working tree's (e.g. the dense implementation this one replaced), so a
before/after comparison needs only git.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import subprocess
import sys
import time
import tracemalloc
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sketch_class(rev: str | None) -> type:
    """``AmsSketch`` of the working tree, or of ``learning/protocols/fda.py`` at git ``rev``."""
    if rev is None:
        from learning.protocols.fda import AmsSketch
        return AmsSketch
    source = subprocess.run(["git", "show", f"{rev}:learning/protocols/fda.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType(f"fda_at_{rev}")
    module.__dict__["__name__"] = module.__name__
    sys.modules[module.__name__] = module
    exec(compile(source, f"fda.py@{rev}", "exec"), module.__dict__)
    return module.AmsSketch


def mib(n: float) -> str:
    return f"{n / 2 ** 20:,.1f} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:,.1f} KiB"


def measure(cls: type, size: int, rows: int, cols: int, repeat: int) -> dict:
    v = np.random.default_rng(1).standard_normal(size)
    tracemalloc.start()
    t0 = time.perf_counter()
    sk = cls(size, rows, cols)
    build_s = time.perf_counter() - t0
    _, build_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    out = sk(v)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert out.shape == (rows, cols)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sk(v)
        times.append(time.perf_counter() - t0)
    return {"pickled": len(pickle.dumps(sk)), "build_s": build_s, "build_peak": build_peak,
            "sketch_s": statistics.median(times), "best_s": min(times), "sketch_peak": peak - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--precision", type=float, default=0.25)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rev", default=None, help="measure AmsSketch at this git revision")
    args = parser.parse_args()

    from learning.protocols.fda import sketch_shape

    rows, cols = sketch_shape(args.precision)
    cls = sketch_class(args.rev)
    print(f"AmsSketch of {args.rev or 'the working tree'}: {rows} x {cols} "
          f"(precision {args.precision})")
    print(f"{'D':>12} {'pickled':>12} {'build s':>9} {'build peak':>12} {'sketch s':>9} "
          f"{'best s':>9} {'sketch peak':>12}")
    for size in args.sizes:
        r = measure(cls, size, rows, cols, args.repeat)
        print(f"{size:>12,} {mib(r['pickled']):>12} {r['build_s']:>9.3f} "
              f"{mib(r['build_peak']):>12} {r['sketch_s']:>9.3f} {r['best_s']:>9.3f} {mib(r['sketch_peak']):>12}",
              flush=True)


if __name__ == "__main__":
    main()
