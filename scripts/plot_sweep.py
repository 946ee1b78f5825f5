#!/usr/bin/python3
"""PNG plots of a sweep: speedup, tau and phase cost per token against the swept key.

usage: specrun report RUN1.h5 RUN2.h5 ... --json > table.json
       scripts/plot_sweep.py table.json OUTDIR [--overwrite]

Reads the table `specrun report` prints for several result files (docs/analysis.md, "Sweeps and
tables over many runs"): `keys` (the configuration keys that differ between the runs) and one
entry per run. The x axis is the first key whose values are all numbers (draft_len, tree_nodes,
temperature), else the first key, as categories; every other differing key makes one line per
combination of its values. Writes:
  OUTDIR/speedup.png        paired speedup over baseline with its 95% interval
  OUTDIR/tau.png            speculative tau (tokens per verify step) and alpha
  OUTDIR/cost_per_token.png ms per generated token of each speculative phase (draft, verify,
                            comm, sample, other) and of baseline's total, one panel per line
Prints the paths it wrote. Runs without a speculative mode (or a paired baseline) leave gaps.
Existing plots are replaced only with --overwrite, never through a link or over the table
(scripts/output_files.py).
"""
import json
import os
import sys

import matplotlib
from output_files import check_output, make_folder, write_output

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["draft", "verify", "comm", "sample", "other"]


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def load(path):
    with open(path) as f:
        table = json.load(f)
    if not isinstance(table, dict) or "runs" not in table or "keys" not in table:
        sys.exit(f"{path}: not the JSON of `specrun report A.h5 B.h5 ... --json` (no keys/runs)")
    runs = table["runs"]
    if len(runs) < 2:
        sys.exit(f"{path}: {len(runs)} run(s); a sweep plot needs at least two")
    keys = table["keys"]
    if not keys:
        sys.exit(f"{path}: the runs do not differ in any configuration key: nothing to plot against")
    numeric = [k for k in keys if all(number(r["config"].get(k)) is not None for r in runs)]
    x_key = numeric[0] if numeric else keys[0]
    others = [k for k in keys if k != x_key]
    categories = sorted({r["config"].get(x_key, "") for r in runs},
                        key=lambda v: (number(v) is None, number(v) or 0, v))

    def x_of(run):
        v = run["config"].get(x_key, "")
        return number(v) if numeric else categories.index(v)

    series = {}
    for r in runs:
        label = ", ".join(f"{k.split('.')[-1]}={r['config'].get(k, '')}" for k in others)
        series.setdefault(label, []).append(r)
    for label in series:
        series[label].sort(key=x_of)
    return x_key, numeric != [], categories, series, x_of


def style(ax, x_key, is_numeric, categories, title):
    ax.set_xlabel(x_key)
    if not is_numeric:
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels(categories)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend() is None and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def main():
    overwrite = "--overwrite" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--overwrite"]
    if len(args) != 2:
        sys.exit(__doc__)
    table_path, outdir = args
    x_key, is_numeric, categories, series, x_of = load(table_path)
    make_folder(outdir)
    names = ("speedup.png", "tau.png", "cost_per_token.png")
    for name in names:  # every one before any is drawn
        check_output(os.path.join(outdir, name), overwrite, [table_path])
    title = os.path.basename(table_path)

    def save(fig, name):
        out = os.path.join(outdir, name)
        fig.tight_layout()
        write_output(out, lambda f: fig.savefig(f, format="png", dpi=100), overwrite,
                     [table_path])
        plt.close(fig)
        print(out)

    def finish(ax, fig, heading, name):
        style(ax, x_key, is_numeric, categories, heading)
        save(fig, name)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, runs in series.items():
        pts = [(x_of(r), r["speedup"]) for r in runs if r.get("speedup")]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ys = [p[1]["value"] for p in pts]
        err = [[y - p[1]["ci_low"] for y, p in zip(ys, pts)],
               [p[1]["ci_high"] - y for y, p in zip(ys, pts)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=4, label=label or "speedup")
    ax.axhline(1.0, color="grey", linewidth=1, linestyle="--")
    ax.set_ylabel("speedup over baseline (95% CI)")
    finish(ax, fig, f"speedup vs {x_key} ({title})", "speedup.png")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax2 = ax.twinx()
    for i, (label, runs) in enumerate(series.items()):
        pts = [(x_of(r), r["tau"], r["alpha"]) for r in runs if r.get("tau") is not None]
        if not pts:
            continue
        colour = f"C{i % 10}"
        suffix = f" ({label})" if label else ""
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colour,
                label="tau" + suffix)
        ax2.plot([p[0] for p in pts], [p[2] or 0 for p in pts], marker="s", linestyle=":",
                 color=colour, label="alpha" + suffix)
    ax.set_ylabel("tau (tokens per verify step)")
    ax2.set_ylabel("alpha (accepted / drafted)")
    ax2.set_ylim(0, 1.05)
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    if handles[0]:
        ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], fontsize=8, loc="best")
    finish(ax, fig, f"tau and alpha vs {x_key} ({title})", "tau.png")

    fig, axes = plt.subplots(1, len(series), figsize=(7 * len(series), 4.5), squeeze=False)
    for ax, (label, runs) in zip(axes[0], series.items()):
        xs = [x_of(r) for r in runs]
        for j, phase in enumerate(PHASES):
            ys = [r.get("ms_per_token", {}).get("speculative", {}).get(phase) for r in runs]
            if any(y for y in ys if y is not None):
                ax.plot(xs, [y if y is not None else float("nan") for y in ys], marker="o",
                        color=f"C{j}", label=f"speculative {phase}")
        base = [r.get("ms_per_token", {}).get("baseline", {}).get("total") for r in runs]
        if any(y for y in base if y is not None):
            ax.plot(xs, [y if y is not None else float("nan") for y in base], color="black",
                    linestyle="--", label="baseline total")
        ax.set_ylabel("ms per generated token")
        style(ax, x_key, is_numeric, categories,
              f"phase cost per token vs {x_key}" + (f" ({label})" if label else ""))
    save(fig, "cost_per_token.png")


if __name__ == "__main__":
    main()
