"""Reading a specrun result file (schema "specrun.result", versions 1 to 7; docs/file-formats.md)
into tables: committed rows only, as specrun's own reader takes them (src/io/result_layout.cpp
find_committed), and the same identities checked (src/analysis/summary.cpp check_identities).
"""
import json

import numpy as np

from . import stats
from ._errors import ResultFileError
from ._tables import make_table

SCHEMA = "specrun.result"
SCHEMA_VERSION = 7  # the newest version this package reads
MODES = ("baseline", "speculative")
PHASES = ("draft", "verify", "comm", "sample", "other", "total")

_SEQUENCE_COLUMNS = ("batch", "prompt_index", "prompt_id", "category", "prompt_len", "generated",
                     "verify_steps", "drafted", "accepted", "finish_reason", "wall_s")
_STEP_COLUMNS = ("batch", "step", "prompt_index", "active", "drafted", "accepted")
_STEP_COLUMNS_V2 = ("depth", "bonus", "emitted")
_BATCH_COLUMNS = ("batch", "sequences_end", "steps_end", "timing_rows_end", "output_tokens_end")


def _h5py():
    try:
        import h5py
    except ImportError as e:  # pragma: no cover - depends on the interpreter
        raise ImportError("specrun.load needs h5py (and numpy): use /usr/bin/python3, or "
                          "`pip install h5py numpy`") from e
    return h5py


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _strings(ds, n):
    return [_text(v) for v in ds[:n]]


def _json_or_empty(text):
    """JSON text parsed, {} when it is not JSON (report's parse_json_or_discarded: the figures
    then take their defaults)."""
    try:
        return json.loads(text)
    except ValueError:
        return {}


def _attr_value(v):
    """An attribute as plain Python: str, bool, int, float, or a list of them."""
    if isinstance(v, (bytes, str)):
        return _text(v)
    if isinstance(v, np.ndarray) and v.ndim > 0:
        return [_attr_value(x) for x in v.tolist()]
    return v.item() if hasattr(v, "item") else v


def _attr(obj, name, default=None):
    return obj.attrs[name] if name in obj.attrs else default


class _Committed:
    """How far a mode's rows are committed (src/io/result_layout.cpp find_committed)."""
    batches = sequences = steps = timing_rows = tokens = 0
    recorded = 0
    ignored = ""


def _rows(ds):
    return int(ds.shape[0])


def _find_committed(g, where):
    recorded = int(_attr(g, "batches_committed", 0))
    n, why = recorded, ""
    batches = {name: g["batches/" + name] for name in _BATCH_COLUMNS}
    for name, d in batches.items():
        if _rows(d) < n:
            n, why = _rows(d), "the commit table %s/batches/%s holds %d rows" % (where, name, _rows(d))
    seq = g["sequences"]
    seq_rows = min(_rows(seq[c]) for c in list(_SEQUENCE_COLUMNS) + ["output_tokens"])
    step_rows = min(_rows(d) for d in g["steps"].values())
    offset_rows, token_rows = _rows(seq["output_offsets"]), _rows(seq["output_tokens"])
    timing_rows = min(_rows(g["timings"]), _rows(g["timings_batch"]))
    for name in ("cpu_timings", "device_timings", "device_passes"):
        if name in g:
            timing_rows = min(timing_rows, _rows(g[name]))
    if "host" in g["batches"]:
        host = min(_rows(g["batches/host"]), _rows(g["batches/host_busy"]))
        if host < n:
            n, why = host, "the host table holds %d rows" % host
    experts = {}
    if "experts" in g:
        for model, e in g["experts"].items():
            for name, d in e["commits"].items():
                if _rows(d) < n:
                    n, why = _rows(d), "the commit table %s/experts/%s/commits/%s holds %d rows" % (
                        where, model, name, _rows(d))
            experts[model] = (min(_rows(d) for d in e["passes"].values()),
                              min(_rows(d) for d in e["sequences"].values()))
    n = max(n, 0)
    ends = {name: batches[name][:n].astype(np.int64) for name in _BATCH_COLUMNS[1:]}
    x_ends = {m: (g["experts"][m]["commits/passes_end"][:n], g["experts"][m]["commits/rows_end"][:n])
              for m in experts}
    s_end, st_end = ends["sequences_end"], ends["steps_end"]
    t_end, k_end = ends["timing_rows_end"], ends["output_tokens_end"]
    for i in range(n):
        if i == 0:
            grows = s_end[0] > 0 and st_end[0] >= 0 and t_end[0] >= 0 and k_end[0] >= 0
        else:
            grows = (s_end[i] > s_end[i - 1] and st_end[i] >= st_end[i - 1]
                     and t_end[i] >= t_end[i - 1] and k_end[i] >= k_end[i - 1])
        for pe, re in x_ends.values():
            grows = grows and pe[i] >= (pe[i - 1] if i else 0) and re[i] >= (re[i - 1] if i else 0)
        if not grows:
            why = ("commit record %d of %s/batches/batch does not follow the one before it "
                   "(sequences_end %d, steps_end %d, timing_rows_end %d, output_tokens_end %d)"
                   % (i + 1, where, s_end[i], st_end[i], t_end[i], k_end[i]))
            n = i
            break
    while n > 0:
        k = n - 1
        c = _Committed()
        c.batches, c.recorded = n, recorded
        c.sequences, c.steps = int(s_end[k]), int(st_end[k])
        c.timing_rows, c.tokens = int(t_end[k]), int(k_end[k])
        present = (c.sequences + 1 <= offset_rows and c.sequences <= seq_rows
                   and c.tokens <= token_rows and c.steps <= step_rows
                   and c.timing_rows <= timing_rows)
        for model, (passes, rows) in experts.items():
            present = present and x_ends[model][0][k] <= passes and x_ends[model][1][k] <= rows
        if present and int(seq["output_offsets"][c.sequences]) == c.tokens:
            if n < recorded:
                c.ignored = why
            return c
        why = "commit record %d of %s/batches/batch points past the rows in the file" % (n, where)
        n -= 1
    c = _Committed()
    c.recorded = recorded
    if recorded > 0:
        c.ignored = why
    return c


def _long_table(values, batch, names, tables, index="row"):
    """A [rows x ranks x columns] table in long form: one row per (row, rank), with the row's
    index (`row`: the row of `timings`; `commit` for the host snapshots: the commit record), its
    batch, the rank, one column per name."""
    rows, ranks = values.shape[0], values.shape[1]
    cols = {index: np.repeat(np.arange(rows, dtype=np.int64), ranks),
            "batch": np.repeat(np.asarray(batch, dtype=np.int64), ranks),
            "rank": np.tile(np.arange(ranks, dtype=np.int32), rows)}
    for i, name in enumerate(names):
        cols[name] = values[:, :, i].reshape(-1)
    return make_table(cols, tables)


class Mode:
    """One mode of a result file (`baseline` or `speculative`): its committed rows.

    Tables (pandas DataFrames when pandas is installed, else numpy record arrays):
      sequences    one row per prompt (docs/file-formats.md `/<mode>/sequences/`), plus
                   `output_len`; the tokens themselves: `outputs[i]`
      steps        one row per (decoding step, sequence), with depth, bonus, emitted (version 1
                   files: derived as specrun derives them, emitted -1)
      timings      one row per (step row, rank): row, batch, rank and ms per phase
      cpu_timings, device_timings, device_passes: the same long form (None when the file
                   predates them)
      host         one row per (committed batch, rank): commit, batch, rank, the snapshot's
                   fields; host_busy: the busy processes per batch
      acceptance   one row per depth i: offered, reached, prior, unconditional, conditional,
                   stored (accepted_per_position)
    Raw arrays: timings_ms [rows x ranks x phases], timing_batch [rows].
    """

    def __init__(self, f, name, path, tables, batch_size=0):
        g = f[name]
        self.name = name
        self.batch_size = batch_size  # data.batch_size: places sequences that have no step
        self.path = path
        where = "%s:/%s" % (path, name)
        self.schema_version = int(f.attrs["schema_version"])
        self.draft_len = int(g.attrs["draft_len"])
        c = _find_committed(g, where)
        self.batches_committed = c.batches
        self.warning = None
        if c.ignored:
            self.warning = ("%s: %d of %d recorded batches left out, read up to the last sound "
                            "commit record (%d batches): %s"
                            % (where, c.recorded - c.batches, c.recorded, c.batches, c.ignored))
        n = c.sequences
        s = g["sequences"]
        seq = {}
        for col in _SEQUENCE_COLUMNS:
            seq[col] = _strings(s[col], n) if col in ("prompt_id", "category") else s[col][:n]
        offsets = s["output_offsets"][: n + 1].astype(np.int64)
        if n and not (np.all(np.diff(offsets) >= 0) and offsets[0] >= 0 and offsets[-1] <= c.tokens):
            raise ResultFileError("%s/sequences/output_offsets is not monotone within [0, %d]: the "
                                  "file is damaged" % (where, c.tokens))
        tokens = s["output_tokens"][: c.tokens]
        self.outputs = [tokens[offsets[i]:offsets[i + 1]] for i in range(n)]
        seq["output_len"] = np.diff(offsets) if n else np.zeros(0, np.int64)
        self._seq = seq
        ns = c.steps
        st = {col: g["steps/" + col][:ns] for col in _STEP_COLUMNS}
        if self.schema_version >= 2:
            for col in _STEP_COLUMNS_V2:
                st[col] = g["steps/" + col][:ns]
        else:  # chains only: depth = drafted, bonus after a fully accepted chain, emitted unknown
            st["depth"] = st["drafted"].copy()
            st["bonus"] = ((st["drafted"] > 0) & (st["accepted"] == st["drafted"])).astype(np.int8)
            st["emitted"] = np.full(ns, -1, np.int32)
        self._steps = st
        nt = c.timing_rows
        self.timings_ms = g["timings"][:nt]
        self.timing_batch = g["timings_batch"][:nt].astype(np.int64)
        self.phases = [_text(p) for p in g["timings"].attrs["phases"]]
        self.n_ranks = max(1, int(g["timings"].shape[1]))
        self.timings = _long_table(self.timings_ms, self.timing_batch, self.phases, tables)
        self.cpu_ms = self.device_ms = self.device_passes_counts = None
        self.cpu_timings = self.device_timings = self.device_passes = self.host = None
        for ds, attr in (("cpu_timings", "cpu_ms"), ("device_timings", "device_ms"),
                         ("device_passes", "device_passes_counts")):
            if ds in g:
                raw = g[ds][:nt]
                setattr(self, attr, raw)
                names = [_text(x) for x in g[ds].attrs["columns"]]
                setattr(self, ds, _long_table(raw, self.timing_batch, names, tables))
        if "host" in g["batches"]:
            hv = g["batches/host"][: c.batches]
            fields = [_text(x) for x in g["batches/host"].attrs["fields"]]
            self.host = _long_table(hv, g["batches/batch"][: c.batches], fields, tables,
                                    index="commit")
            self.host_busy = _strings(g["batches/host_busy"], c.batches)
        apos = g["batches/accepted_per_position"][: c.batches]
        self.accepted_per_position = (apos.sum(axis=0).astype(np.int64) if c.batches
                                      else np.zeros(self.draft_len, np.int64))
        self.sequences = make_table(seq, tables)
        self.steps = make_table(st, tables)
        counts = stats.acceptance_counts(st["depth"], st["accepted"])
        acc = {"depth": np.arange(1, len(counts["offered"]) + 1, dtype=np.int32)}
        acc.update(counts)
        acc["unconditional"], acc["conditional"] = stats.acceptance_by_depth(counts)
        stored = np.zeros(len(acc["depth"]), np.int64)
        k = min(len(stored), len(self.accepted_per_position))
        stored[:k] = self.accepted_per_position[:k]
        acc["stored"] = stored
        self.acceptance = make_table(acc, tables)

    def column(self, table, name):
        """A column of `sequences` or `steps` as a numpy array, whatever the table type."""
        return np.asarray({"sequences": self._seq, "steps": self._steps}[table][name])

    def summary(self):
        """The mode's figures as `report --json` gives them under modes.<name> (all but the
        expert accounting)."""
        return stats.summarize_mode(self, self.batch_size)

    def __repr__(self):
        return "<specrun.Mode %s: %d prompts, %d steps, %d ranks>" % (
            self.name, len(self._seq["prompt_index"]), len(self._steps["batch"]), self.n_ranks)


class Result:
    """A result file, read once (`specrun.load`). Attributes:
      path, schema_version, attrs (root attributes), job (the /job attributes), resolved (the
      merged configuration, parsed), provenance (one row per rank: the scalar fields of each
      rank's record), rank_records (each rank's record, parsed), mismatches, models,
      target_weight_bytes, alarms, modes (name -> Mode, baseline first), warnings.
    """

    def __init__(self, path, tables="auto"):
        h5py = _h5py()
        self.path = str(path)
        try:
            f = h5py.File(self.path, "r")
        except OSError as e:
            raise ResultFileError("%s: cannot open as HDF5: %s" % (self.path, e)) from e
        with f:
            if "schema" not in f.attrs:
                raise ResultFileError("%s has no 'schema' attribute: it is not a specrun result file"
                                      % self.path)
            schema = _text(f.attrs["schema"])
            if schema != SCHEMA:
                raise ResultFileError("%s has schema '%s', expected '%s': it is not a specrun "
                                      "result file" % (self.path, schema, SCHEMA))
            self.schema_version = int(f.attrs["schema_version"])
            if not 1 <= self.schema_version <= SCHEMA_VERSION:
                raise ResultFileError("%s has result schema version %d; this package reads 1 to %d "
                                      "(written by a newer specrun?)"
                                      % (self.path, self.schema_version, SCHEMA_VERSION))
            self.attrs = {k: _attr_value(v) for k, v in f.attrs.items()}
            self.alarms = list(self.attrs.get("alarms", []))
            self.job = {k: _text(v) for k, v in f["job"].attrs.items()}
            self.resolved = _json_or_empty(self.job.get("resolved", ""))
            prov = f["provenance"]
            self.rank_records = [json.loads(_text(r)) for r in prov["ranks"][:]]
            self.mismatches = json.loads(_text(prov["mismatches"][()]))
            self.models = json.loads(_text(prov.attrs["models"])) if "models" in prov.attrs else {}
            self.target_weight_bytes = (prov["target_weight_bytes"][:].astype(np.int64)
                                        if "target_weight_bytes" in prov else None)
            scalar = sorted({k for r in self.rank_records for k, v in r.items()
                             if not isinstance(v, (dict, list))})
            self.provenance = make_table(
                {k: [r.get(k) for r in self.rank_records] for k in scalar}, tables, objects=True)
            self.modes = {m: Mode(f, m, self.path, tables, self.batch_size) for m in MODES if m in f}
        self.warnings = [m.warning for m in self.modes.values() if m.warning]

    @property
    def baseline(self):
        return self.modes.get("baseline")

    @property
    def speculative(self):
        return self.modes.get("speculative")

    def __getitem__(self, mode):
        return self.modes[mode]

    @property
    def greedy(self):
        """Whether the job decoded at temperature 0 (summary.cpp resolved_is_greedy)."""
        t = self.resolved.get("decode", {}).get("temperature") if isinstance(self.resolved, dict) else None
        return isinstance(t, (int, float)) and not isinstance(t, bool) and t <= 0

    @property
    def seed(self):
        """job.seed, the bootstrap seed `report` uses (1 when absent)."""
        s = self.resolved.get("job", {}).get("seed") if isinstance(self.resolved, dict) else None
        return s if isinstance(s, int) and not isinstance(s, bool) else 1

    @property
    def batch_size(self):
        b = self.resolved.get("data", {}).get("batch_size") if isinstance(self.resolved, dict) else None
        return int(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else 0

    def speedup(self, seed=None, resamples=2000):
        """The paired speedup with its bootstrap 95% interval (an Estimate), as `report`."""
        return stats.paired_speedup(stats.paired_samples(self), resamples,
                                    self.seed if seed is None else seed)

    def summary(self, seed=None):
        """The figures of `specrun report --json` that this package computes, in its shape."""
        return stats.summarize_run(self, self.seed if seed is None else seed)

    def __repr__(self):
        return "<specrun.Result %s: schema %d, modes %s>" % (
            self.path, self.schema_version, ", ".join(self.modes))


def load(path, tables="auto"):
    """Reads a result file. `tables`: "auto" (pandas DataFrames when pandas is importable, else
    numpy record arrays), "pandas" or "numpy"."""
    return Result(path, tables)
