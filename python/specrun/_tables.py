"""Tables as pandas DataFrames when pandas is importable, else numpy record arrays."""
import numpy as np


def _pandas():
    try:
        import pandas
    except ImportError:
        return None
    return pandas


def make_table(columns, kind="auto", objects=False):
    """`columns`: name -> sequence, all of one length. `kind`: "auto", "pandas" or "numpy".
    Strings become str columns (object dtype in pandas, unicode in numpy); `objects` keeps
    mixed values (provenance fields) as Python objects."""
    if kind not in ("auto", "pandas", "numpy"):
        raise ValueError("tables must be 'auto', 'pandas' or 'numpy', not %r" % (kind,))
    pd = _pandas() if kind in ("auto", "pandas") else None
    if kind == "pandas" and pd is None:
        raise ImportError("tables='pandas' needs pandas (pip install pandas); "
                          "tables='numpy' gives numpy record arrays")
    if pd is not None:
        return pd.DataFrame({k: (list(v) if objects else v) for k, v in columns.items()})
    arrays, names = [], []
    for name, values in columns.items():
        if objects:
            a = np.empty(len(values), dtype=object)
            a[:] = list(values)
        elif isinstance(values, list):
            a = np.array(values, dtype=str) if values else np.zeros(0, dtype="U1")
        else:
            a = np.asarray(values)
        arrays.append(a)
        names.append(name)
    if not arrays:
        return np.rec.fromarrays([np.zeros(0)], names=["empty"])[:0]
    return np.rec.fromarrays(arrays, names=names)
