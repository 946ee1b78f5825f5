#!/usr/bin/python3
"""PNG plots of a specrun result file (h5py + matplotlib, Agg backend; no display needed).

usage: scripts/plot_results.py RESULT.h5 OUTDIR [--overwrite]

Writes, from the committed rows only (docs/file-formats.md, "Commit protocol"):
  OUTDIR/acceptance.png  acceptance by depth of the speculative mode: P(n >= i)
                         (unconditional) and P(n >= i | n >= i-1) (conditional)
  OUTDIR/phases.png      mean ms per step of each phase, stacked, per rank, one panel per mode
  OUTDIR/tau.png         tau over decoding steps: tokens emitted per sequence in each step
                         (accepted + 1, the mean over the sequences active in it) and the
                         running tau, in commit order
Definitions: docs/analysis.md. Prints the paths it wrote. Existing plots are replaced only with
--overwrite, never through a link or over the result file (scripts/output_files.py).
"""
import os
import sys

import h5py
import matplotlib
from output_files import check_output, make_folder, write_output

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PHASES = ["draft", "verify", "comm", "sample", "other"]


def committed(g):
    nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()])
    if nb == 0:
        return 0, 0
    return int(g["batches/steps_end"][nb - 1]), int(g["batches/timing_rows_end"][nb - 1])


def load(path):
    modes = {}
    with h5py.File(path, "r") as f:
        if f.attrs.get("schema") != "specrun.result":
            sys.exit(f"{path}: not a specrun result file (schema {f.attrs.get('schema')!r})")
        for mode in ("baseline", "speculative"):
            if mode not in f:
                continue
            g = f[mode]
            ns, nt = committed(g)
            steps = {k: g["steps/" + k][:ns] for k in ("batch", "step", "drafted", "accepted")}
            # Schema 2 records each proposal's depth; a schema-1 file's chains have depth = drafted.
            steps["depth"] = g["steps/depth"][:ns] if "depth" in g["steps"] else steps["drafted"]
            modes[mode] = {
                "steps": steps,
                "timings": g["timings"][:nt].astype(np.float64),
                "phases": [str(p) for p in g["timings"].attrs["phases"]],
            }
        title = f"{os.path.basename(path)}  (world {f.attrs['world_size']}, tp {f.attrs['tp']})"
    return modes, title


def plot_acceptance(modes, title):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    st = modes.get("speculative", {}).get("steps")
    if st is None or len(st["depth"]) == 0 or st["depth"].max() == 0:
        ax.text(0.5, 0.5, "no speculative steps in this file", ha="center", va="center")
    else:
        k = int(st["depth"].max())
        pos = np.arange(1, k + 1)
        unc, cond = [], []
        for i in pos:
            offered = st["depth"] >= i
            reached = offered & (st["accepted"] >= i)
            prior = offered & (st["accepted"] >= i - 1)
            unc.append(reached.sum() / max(1, offered.sum()))
            cond.append(reached.sum() / max(1, prior.sum()))
        ax.bar(pos - 0.2, unc, width=0.4, label="P(n >= i)")
        ax.bar(pos + 0.2, cond, width=0.4, label="P(n >= i | n >= i-1)")
        for x, y in zip(pos, unc):
            ax.text(x - 0.2, y + 0.01, f"{y:.2f}", ha="center", fontsize=8)
        ax.set_xticks(pos)
        ax.set_ylim(0, 1.1)
        ax.legend(loc="lower left")
    ax.set_xlabel("depth i (draft position, for chains)")
    ax.set_ylabel("acceptance")
    ax.set_title("acceptance by depth (speculative)\n" + title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_phases(modes, title):
    names = list(modes)
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5 * max(1, len(names)), 4.5),
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, mode in zip(axes[0], names):
        t = modes[mode]["timings"]
        idx = [modes[mode]["phases"].index(p) for p in PHASES]
        ranks = np.arange(t.shape[1])
        bottom = np.zeros(len(ranks))
        with np.errstate(all="ignore"):
            for c, (p, i) in enumerate(zip(PHASES, idx)):
                mean = np.nan_to_num(np.nanmean(t[:, :, i], axis=0)) if len(t) else bottom * 0
                ax.bar(ranks, mean, bottom=bottom, label=p, color=colors[c % len(colors)])
                bottom += mean
        ax.set_xticks(ranks)
        ax.set_xlabel("rank")
        ax.set_ylabel("mean ms per step")
        ax.set_title(f"{mode} ({len(t)} steps)")
        ax.legend(fontsize=8)
    fig.suptitle("phase breakdown per rank\n" + title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_tau(modes, title):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    st = modes.get("speculative", {}).get("steps")
    if st is None or len(st["batch"]) == 0:
        ax.text(0.5, 0.5, "no speculative steps in this file", ha="center", va="center")
    else:
        # One point per (batch, step) in commit order: rows of a step are consecutive.
        key = st["batch"].astype(np.int64) * 1_000_000 + st["step"]
        change = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate([[0], change])
        emitted = st["accepted"].astype(np.float64) + 1
        per_step = np.add.reduceat(emitted, starts) / np.diff(np.append(starts, len(key)))
        running = np.cumsum(emitted)[np.append(starts[1:], len(key)) - 1] / \
            np.append(starts[1:], len(key))
        x = np.arange(len(per_step))
        ax.plot(x, per_step, ".", alpha=0.5, label="tokens per sequence in the step")
        ax.plot(x, running, "-", label="running tau")
        k = int(st["depth"].max())
        ax.axhline(k + 1, color="gray", ls=":", label=f"maximum (depth + 1 = {k + 1})")
        ax.set_ylim(0, k + 1.5)
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("decoding step (commit order)")
    ax.set_ylabel("tokens emitted per verify step")
    ax.set_title("tau over steps (speculative)\n" + title, fontsize=10)
    fig.tight_layout()
    return fig


def main():
    overwrite = "--overwrite" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--overwrite"]
    if len(args) != 2:
        sys.exit(__doc__)
    path, outdir = args
    plots = (("acceptance.png", plot_acceptance), ("phases.png", plot_phases),
             ("tau.png", plot_tau))
    modes, title = load(path)
    make_folder(outdir)
    targets = [os.path.join(outdir, name) for name, _ in plots]
    for target in targets:  # every one before any is drawn
        check_output(target, overwrite, [path])
    for target, (_, plot) in zip(targets, plots):
        fig = plot(modes, title)
        write_output(target, lambda f: fig.savefig(f, format="png", dpi=100), overwrite, [path])
        plt.close(fig)
        print(target)


if __name__ == "__main__":
    main()
