"""specrun result files from Python (docs/analysis.md, "From Python").

    import specrun
    r = specrun.load("out/result.h5")
    r.speculative.sequences            # one row per prompt (DataFrame, or numpy record array)
    r.speculative.acceptance           # per-position acceptance
    r.summary()["modes"]["speculative"]["tau"]
    r.speedup()                        # Estimate(value, low, high), as `specrun report`

Needs numpy and h5py; tables are pandas DataFrames when pandas is importable, else numpy record
arrays (load(path, tables="numpy") asks for those).
"""
try:
    import numpy  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the interpreter
    raise ImportError("the specrun package needs numpy and h5py (Debian: /usr/bin/python3 has "
                      "both; elsewhere `pip install numpy h5py`)") from e

from ._errors import ResultFileError  # noqa: E402
from .result import MODES, PHASES, SCHEMA, SCHEMA_VERSION, Mode, Result, load  # noqa: E402
from .stats import (  # noqa: E402
    Estimate, acceptance_by_depth, acceptance_counts, bootstrap_ratio, paired_samples,
    paired_speedup, summarize_mode, summarize_run)

__all__ = ["load", "Result", "Mode", "Estimate", "ResultFileError", "MODES", "PHASES", "SCHEMA",
           "SCHEMA_VERSION", "acceptance_by_depth", "acceptance_counts", "bootstrap_ratio",
           "paired_samples", "paired_speedup", "summarize_mode", "summarize_run"]
