"""The statistics of `specrun report`, computed as src/analysis/summary.cpp computes them, so that
they equal `report --json` (counts exactly, floats to the last bit in the cases tested; see
docs/analysis.md "From Python"):

  tau      = (generated - prompts) / verify steps   (the prefill's first token counts in neither)
  alpha    = accepted / drafted
  acceptance at depth i: P(n >= i) over the steps whose proposal reached depth i
           (unconditional), P(n >= i | n >= i-1) over those that also accepted i-1 (conditional)
  tokens/s = generated / the sum over batches of the batch's slowest sequence's wall time
  speedup  = (baseline seconds / tokens) / (speculative seconds / tokens) over paired prompts,
           with a percentile bootstrap 95% interval: 2000 resamples (1000 per category) drawn with
           the C++ random stream (specrun._rng), seeded with job.seed.

Sums are taken in the C++ order (sequentially, in row or resample order) so that the floating
point results are the same numbers, not merely close ones.
"""
import numpy as np

from ._errors import ResultFileError
from ._rng import Picker

PHASES = ("draft", "verify", "comm", "sample", "other", "total")
DEVICE_COLUMNS = ("draft", "verify", "sample", "other", "total")


class Estimate(tuple):
    """A value with its bootstrap 95% interval: (value, low, high). Its JSON shape,
    `to_json()`, is `report --json`'s {"value", "low", "high"}."""
    __slots__ = ()

    def __new__(cls, value=0.0, low=0.0, high=0.0):
        return tuple.__new__(cls, (float(value), float(low), float(high)))

    value = property(lambda self: self[0])
    low = property(lambda self: self[1])
    high = property(lambda self: self[2])

    def to_json(self):
        return {"value": self.value, "low": self.low, "high": self.high}

    def __repr__(self):
        return "Estimate(value=%r, low=%r, high=%r)" % tuple(self)


def _seqsum(values):
    """Sum from left to right, as a C++ loop adds (numpy's sum is pairwise, Python 3.12's sum()
    compensated: both can differ in the last bit)."""
    a = np.asarray(values, dtype=np.float64)
    return float(np.cumsum(a)[-1]) if a.size else 0.0


def percentile_sorted(v, f):
    """Linear interpolation between order statistics, the C++ formula (numpy's "linear" method
    with the C++ rounding)."""
    if len(v) == 0:
        return 0.0
    pos = f * float(len(v) - 1)
    i = int(pos)
    frac = pos - i
    return float(v[i]) * (1 - frac) + float(v[i + 1]) * frac if i + 1 < len(v) else float(v[i])


def quantiles(values):
    """{"mean", "p50", "p90"} of `values` (zeros for none)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0}
    s = np.sort(v)
    return {"mean": _seqsum(v) / v.size, "p50": percentile_sorted(s, 0.5),
            "p90": percentile_sorted(s, 0.9)}


def interval_from(value, samples):
    s = np.sort(np.asarray(samples, dtype=np.float64))
    return Estimate(value, percentile_sorted(s, 0.025), percentile_sorted(s, 0.975))


def per_step_mean(table, column):
    """Per row of a [rows x ranks x columns] table, the mean of `column` over the ranks with a
    value (NaN: the rank did not run that row); rows without any value are left out."""
    t = np.asarray(table)
    if t.size == 0:
        return np.zeros(0)
    x = t[:, :, column].astype(np.float64)
    have = ~np.isnan(x)
    total = np.zeros(x.shape[0])
    for k in range(x.shape[1]):  # rank by rank, as the C++ loop adds
        total = total + np.where(have[:, k], x[:, k], 0.0)
    n = have.sum(axis=1)
    return total[n > 0] / n[n > 0]


def acceptance_counts(depth, accepted):
    """Per depth i = 1..max depth: `offered` (steps whose proposal reached depth i), `reached`
    (of those, accepting >= i) and `prior` (of those, accepting >= i-1)."""
    depth = np.asarray(depth, dtype=np.int64)
    accepted = np.asarray(accepted, dtype=np.int64)
    k_max = int(depth.max()) if depth.size else 0

    def at_least(v):  # index i-1: how many of v are >= i, for i = 1..k_max
        counts = np.bincount(np.clip(v, 0, k_max), minlength=k_max + 1)
        return np.cumsum(counts[::-1])[::-1][1:].astype(np.int64)

    # depth >= i and accepted >= i  <=>  min(depth, accepted) >= i (and likewise for i - 1)
    return {"offered": at_least(depth), "reached": at_least(np.minimum(depth, accepted)),
            "prior": at_least(np.minimum(depth, accepted + 1))}


def acceptance_by_depth(counts):
    """(unconditional, conditional) acceptance per depth from acceptance_counts; 0 where nothing
    was offered."""
    unc = [r / o if o > 0 else 0.0 for r, o in zip(counts["reached"].tolist(), counts["offered"].tolist())]
    cond = [r / p if p > 0 else 0.0 for r, p in zip(counts["reached"].tolist(), counts["prior"].tolist())]
    return np.array(unc, dtype=np.float64), np.array(cond, dtype=np.float64)


def check_identities(mode):
    """The identities `report` checks (summary.cpp check_identities, expert records aside):
    raises ResultFileError naming the file, the mode and the row."""
    where = "%s: %s" % (mode.path, mode.name)
    st = {k: np.asarray(mode.column("steps", k), dtype=np.int64)
          for k in ("batch", "step", "prompt_index", "drafted", "depth", "accepted", "emitted")}
    bad = np.flatnonzero(~((st["accepted"] >= 0) & (st["accepted"] <= st["depth"])
                           & (st["depth"] <= st["drafted"])))
    if bad.size:
        r = bad[0]
        raise ResultFileError(
            "%s: the step row of batch %d, step %d, prompt %d has drafted %d, depth %d, accepted %d "
            "(expected 0 <= accepted <= depth <= drafted)" % (
                where, st["batch"][r], st["step"][r], st["prompt_index"][r], st["drafted"][r],
                st["depth"][r], st["accepted"][r]))
    keys, inverse = np.unique(st["prompt_index"], return_inverse=True)
    sums = {}
    for name in ("drafted", "accepted"):
        acc = np.zeros(len(keys), np.int64)
        np.add.at(acc, inverse, st[name])
        sums[name] = acc
    sums["steps"] = np.bincount(inverse, minlength=len(keys)).astype(np.int64)
    emitted = np.zeros(len(keys), np.int64)
    np.add.at(emitted, inverse, np.maximum(st["emitted"], 0))
    unknown = np.zeros(len(keys), bool)
    np.logical_or.at(unknown, inverse, st["emitted"] < 0)
    slot = {int(k): i for i, k in enumerate(keys.tolist())}
    seq = {k: np.asarray(mode.column("sequences", k), dtype=np.int64)
           for k in ("prompt_index", "verify_steps", "drafted", "accepted", "generated")}
    used = set()
    for row in range(len(seq["prompt_index"])):
        p = int(seq["prompt_index"][row])
        i = slot.get(p) if p not in used else None
        used.add(p)
        got = ((int(sums["steps"][i]), int(sums["drafted"][i]), int(sums["accepted"][i]),
                int(emitted[i]), bool(unknown[i])) if i is not None else (0, 0, 0, 0, False))
        want_emitted = int(seq["generated"][row]) - (1 if seq["generated"][row] > 0 else 0)
        if (got[0] != seq["verify_steps"][row] or got[1] != seq["drafted"][row]
                or got[2] != seq["accepted"][row] or (not got[4] and got[3] != want_emitted)):
            raise ResultFileError(
                "%s: prompt %d: its step rows sum to %d verify steps, %d drafted, %d accepted, %s "
                "emitted, but its sequence row has %d, %d, %d and %d generated (one from the "
                "prefill): the result file is inconsistent" % (
                    where, p, got[0], got[1], got[2], "?" if got[4] else got[3],
                    seq["verify_steps"][row], seq["drafted"][row], seq["accepted"][row],
                    seq["generated"][row]))
    orphans = sorted(set(slot) - used)
    if orphans:
        raise ResultFileError("%s: step rows name prompt %d, which has no sequence row"
                              % (where, orphans[0]))
    if len(st["batch"]) != int(seq["verify_steps"].sum()):
        raise ResultFileError("%s: the accepted-length histogram holds %d steps but the sequences "
                              "made %d" % (where, len(st["batch"]), int(seq["verify_steps"].sum())))
    stored = np.asarray(mode.accepted_per_position, dtype=np.int64)
    if stored.size:
        from_steps = (st["accepted"][None, :] > np.arange(stored.size)[:, None]).sum(axis=1)
        for i in np.flatnonzero(from_steps != stored):
            raise ResultFileError(
                "%s: accepted_per_position[%d] is %d but the step rows accept %d tokens at "
                "position %d: the result file is inconsistent" % (where, i, stored[i], from_steps[i], i))
    if len(mode.timing_batch):
        ranks = np.isfinite(np.asarray(mode.timings_ms)[:, :, PHASES.index("total")]).sum(axis=1)
        ranks_of, rows_of = {}, {}
        for b, n in zip(mode.timing_batch.tolist(), ranks.tolist()):
            rows_of[b] = rows_of.get(b, 0) + 1
            first = ranks_of.setdefault(b, n)
            if n == 0 or first != n:
                raise ResultFileError("%s: batch %d has timing rows from %d and from %d ranks: every "
                                      "rank of its group reports every step" % (where, b, first, n))
        steps_of = {}
        for b, s in zip(st["batch"].tolist(), st["step"].tolist()):
            steps_of.setdefault(b, set()).add(s)
        for b, s in sorted(steps_of.items()):
            if rows_of.get(b, 0) != len(s):
                raise ResultFileError("%s: batch %d has %d steps but %d timing rows"
                                      % (where, b, len(s), rows_of.get(b, 0)))


def _batch_of(mode, batch_size):
    """prompt index -> batch, from the step rows, else prompt_index // batch_size (summary.cpp
    batch_of_sequences; a sequence without steps and without a batch size is a batch alone)."""
    batch_of = dict(zip(np.asarray(mode.column("steps", "prompt_index")).tolist(),
                        np.asarray(mode.column("steps", "batch")).tolist()))
    for p in np.asarray(mode.column("sequences", "prompt_index")).tolist():
        if p not in batch_of:
            batch_of[p] = p // batch_size if batch_size > 0 else -1 - p
    return batch_of


def batch_walls(mode, batch_size):
    """batch -> (wall seconds: its slowest sequence, tokens generated), in batch order."""
    batch_of = _batch_of(mode, batch_size)
    walls = {}
    for p, w, g in zip(np.asarray(mode.column("sequences", "prompt_index")).tolist(),
                       np.asarray(mode.column("sequences", "wall_s")).tolist(),
                       np.asarray(mode.column("sequences", "generated")).tolist()):
        b = batch_of[p]
        old = walls.get(b, (0.0, 0))
        walls[b] = (max(old[0], w), old[1] + g)
    return dict(sorted(walls.items()))


def _category(c):
    return c if c else "(none)"


def _ranks_differ(per_rank):
    means = [q["mean"] for q in per_rank if not (q["mean"] == 0 and q["p90"] == 0)]
    if len(means) < 2:
        return False
    lo, hi = min(means), max(means)
    return hi - lo > 0.01 and hi - lo > 0.1 * (_seqsum(means) / len(means))


def _device_passes(counts):
    """summary.cpp device_pass_counts: "draft"/"verify" -> replayed, captured, eager, unrecorded."""
    if counts is None or np.asarray(counts).size == 0:
        return {}
    cells = np.asarray(counts, dtype=np.float32).reshape(-1, 8)
    cells = cells[~np.isnan(cells[:, 0])]
    out = {}
    for name, at in (("draft", 0), ("verify", 4)):
        c = cells[:, at:at + 4]
        c = c[(c[:, 0] + c[:, 1] + c[:, 2] + c[:, 3]) > 0]
        if len(c) == 0:
            continue
        r, cap, e, u = (_seqsum(c[:, j]) for j in range(4))
        total = r + cap + (e + u)
        out[name] = {"passes": total, "replayed": r, "captured": cap, "eager": e, "unrecorded": u,
                     "graph_share": (r + cap) / total if total > 0 else 0.0}
    return out


def summarize_mode(mode, batch_size=0):
    """A mode's figures, keyed as `report --json` keys modes.<name> (expert figures aside)."""
    check_identities(mode)
    col = lambda t, k: np.asarray(mode.column(t, k))
    generated, steps_n = col("sequences", "generated"), col("sequences", "verify_steps")
    drafted_s, accepted_s = col("sequences", "drafted"), col("sequences", "accepted")
    m = {"prompts": int(len(generated)), "generated": int(generated.sum()),
         "verify_steps": int(steps_n.sum()), "drafted": int(drafted_s.sum()),
         "accepted": int(accepted_s.sum())}
    walls = batch_walls(mode, batch_size)
    m["batches"] = len(walls)
    m["seconds"] = _seqsum([w for w, _ in walls.values()])
    m["tokens_per_s"] = m["generated"] / m["seconds"] if m["seconds"] > 0 else 0.0
    m["tau"] = (m["generated"] - m["prompts"]) / m["verify_steps"] if m["verify_steps"] > 0 else 0.0
    m["alpha"] = m["accepted"] / m["drafted"] if m["drafted"] > 0 else 0.0
    cats = {}
    for c, g, s, d, a in zip(mode.column("sequences", "category").tolist(), generated.tolist(),
                             steps_n.tolist(), drafted_s.tolist(), accepted_s.tolist()):
        x = cats.setdefault(_category(c), [0, 0, 0, 0, 0])
        for j, v in enumerate((1, g, s, d, a)):
            x[j] += v
    m["categories"] = {name: {"prompts": p, "generated": g,
                              "tau": (g - p) / s if s > 0 else 0.0,
                              "alpha": a / d if d > 0 else 0.0}
                       for name, (p, g, s, d, a) in sorted(cats.items())}
    depth, acc, nodes = col("steps", "depth"), col("steps", "accepted"), col("steps", "drafted")
    counts = acceptance_counts(depth, acc)
    unc, cond = acceptance_by_depth(counts)
    m["acceptance_unconditional"], m["acceptance_conditional"] = unc.tolist(), cond.tolist()
    k_max = len(counts["offered"])
    m["nodes_histogram"], m["accepted_histogram"], m["depth_histogram"] = {}, [], []
    m["bonus_steps"], m["mean_nodes"], m["mean_depth"] = 0, 0.0, 0.0
    if m["drafted"] > 0:
        values, n = np.unique(nodes, return_counts=True)
        m["nodes_histogram"] = {str(int(v)): int(c) for v, c in zip(values, n)}
        m["accepted_histogram"] = np.bincount(acc, minlength=k_max + 1).astype(int).tolist()
        m["depth_histogram"] = np.bincount(depth, minlength=k_max + 1).astype(int).tolist()
        m["bonus_steps"] = int(col("steps", "bonus").astype(np.int64).sum())
        n_steps = float(max(len(depth), 1))
        m["mean_nodes"] = int(nodes.astype(np.int64).sum()) / n_steps
        m["mean_depth"] = int(depth.astype(np.int64).sum()) / n_steps
    t = np.asarray(mode.timings_ms)
    m["step_rows"] = int(t.shape[0])
    m["phases_ms"], m["phases_ms_per_rank"] = {}, {}
    for p, name in enumerate(PHASES):
        m["phases_ms"][name] = quantiles(per_step_mean(t, p))
        per_rank = [quantiles(t[:, k, p][~np.isnan(t[:, k, p])]) for k in range(mode.n_ranks)]
        m["phases_ms_per_rank"][name] = {"ranks": per_rank, "ranks_differ": _ranks_differ(per_rank)}
    m["device_phases_ms"] = {}
    if mode.device_ms is not None:
        for c, name in enumerate(DEVICE_COLUMNS):
            v = per_step_mean(mode.device_ms, c)
            if v.size:
                m["device_phases_ms"][name] = quantiles(v)
    m["device_passes"] = _device_passes(mode.device_passes_counts)
    return m


class PairedSamples:
    """Per prompt decoded in both modes (in speculative row order): baseline and speculative
    seconds and tokens, the category, and how many outputs are token-identical."""

    def __init__(self):
        self.b_seconds, self.b_tokens, self.s_seconds, self.s_tokens = [], [], [], []
        self.categories, self.identical = [], 0

    def __len__(self):
        return len(self.b_seconds)


def paired_samples(result):
    out = PairedSamples()
    base, spec = result.modes.get("baseline"), result.modes.get("speculative")
    if base is None or spec is None:
        return out
    by_index = {}
    for i, p in enumerate(np.asarray(base.column("sequences", "prompt_index")).tolist()):
        by_index[p] = i
    bw, bg = base.column("sequences", "wall_s").tolist(), base.column("sequences", "generated").tolist()
    sw, sg = spec.column("sequences", "wall_s").tolist(), spec.column("sequences", "generated").tolist()
    cats = spec.column("sequences", "category").tolist()
    for j, p in enumerate(np.asarray(spec.column("sequences", "prompt_index")).tolist()):
        i = by_index.get(p)
        if i is None:
            continue
        out.b_seconds.append(bw[i])
        out.b_tokens.append(float(bg[i]))
        out.s_seconds.append(sw[j])
        out.s_tokens.append(float(sg[j]))
        out.categories.append(_category(cats[j]))
        out.identical += int(np.array_equal(base.outputs[i], spec.outputs[j]))
    return out


def _resampled_sums(picker, columns, n, resamples):
    """Yields, per chunk of resamples, each column's sum over the drawn items (C++ order)."""
    chunk = max(1, (1 << 22) // n)
    done = 0
    while done < resamples:
        r = min(chunk, resamples - done)
        idx = picker.draws(n, r * n).reshape(r, n)
        yield [np.cumsum(c[idx], axis=1)[:, -1] for c in columns]
        done += r


def _speedup_of(bs, bt, ss, st):
    bs, bt, ss, st = (np.asarray(x, dtype=np.float64) for x in (bs, bt, ss, st))
    ok = (bt > 0) & (st > 0) & (ss > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, (bs / bt) / (ss / st), 0.0)


def paired_speedup(samples, resamples=2000, seed=1):
    """The speedup of paired prompts with its percentile bootstrap 95% interval (an Estimate),
    the C++ resampling reproduced draw for draw."""
    n = len(samples)
    if n == 0:
        return Estimate()
    cols = [np.asarray(c, dtype=np.float64) for c in
            (samples.b_seconds, samples.b_tokens, samples.s_seconds, samples.s_tokens)]
    value = float(_speedup_of(*[_seqsum(c) for c in cols]))
    picker, stats = Picker(seed), []
    for sums in _resampled_sums(picker, cols, n, resamples):
        stats.append(_speedup_of(*sums))
    return interval_from(value, np.concatenate(stats) if stats else [])


def bootstrap_ratio(num, den, resamples=2000, seed=1):
    """sum(num) / sum(den) with a percentile bootstrap 95% interval over items (summary.cpp
    bootstrap_ratio); empty input or a zero denominator gives 0."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    n = len(num)
    if n == 0 or len(den) != n:
        return Estimate()
    ratio = lambda a, b: np.where(b != 0, a / np.where(b != 0, b, 1), 0.0)
    value = float(ratio(_seqsum(num), _seqsum(den)))
    stats = [ratio(a, b) for a, b in _resampled_sums(Picker(seed), [num, den], n, resamples)]
    return interval_from(value, np.concatenate(stats) if stats else [])


def summarize_run(result, seed=1):
    """The figures of `report --json` this package computes: modes.<name> (summarize_mode),
    paired, greedy and, with both modes, paired_prompts, speedup, greedy_identical and
    speedup_by_category (only with more than one category)."""
    out = {"modes": {name: summarize_mode(m, result.batch_size) for name, m in result.modes.items()},
           "paired": False, "greedy": result.greedy}
    p = paired_samples(result)
    if len(p) == 0:
        return out
    out["paired"] = True
    out["paired_prompts"] = len(p)
    out["greedy_identical"] = p.identical
    out["speedup"] = paired_speedup(p, 2000, seed).to_json()
    by_cat = {}
    names = sorted(set(p.categories))
    if len(names) > 1:
        for name in names:
            sub = PairedSamples()
            for i, c in enumerate(p.categories):
                if c == name:
                    sub.b_seconds.append(p.b_seconds[i])
                    sub.b_tokens.append(p.b_tokens[i])
                    sub.s_seconds.append(p.s_seconds[i])
                    sub.s_tokens.append(p.s_tokens[i])
            by_cat[name] = paired_speedup(sub, 1000, seed).to_json()
    out["speedup_by_category"] = by_cat
    return out
