#!/usr/bin/env python3
"""Figure of the GPU benchmark (tests/unit/test_cuda_bench.cpp, bench.json): left, device time
per forward step of each case (decode, verify of 5, 32-node tree; batch 1 and 8) with step graphs
off, on, and on with the projections on the tensor cores (when the file has that configuration);
middle, the achieved memory bandwidth as a fraction of the measured copy bandwidth; right, where a
decode step's device time goes (each op of one layer alone, times 16 layers, and lm_head), at 1
and 5 tokens.

usage: plot_bench.py BENCH.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

report = json.load(open(sys.argv[1]))
steps = report.get("steps", [])
cases = []
for s in steps:
    key = (s["case"], s["batch"])
    if key not in cases:
        cases.append(key)
labels = [f"{c}\nB={b}" for c, b in cases]


def value(case, batch, config, field):
    """The step of a configuration: "off", "on" (files before the variants have no label), or
    "on-tc"."""
    for s in steps:
        if (s["case"] == case and s["batch"] == batch and
                s.get("config", "on" if s["graphs"] else "off") == config):
            return s[field]
    return 0.0


has_tc = any(s.get("config") == "on-tc" for s in steps)
fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
x = range(len(cases))
bars = [("off", "launch by launch", "tab:gray"), ("on", "step graphs", "tab:blue")]
if has_tc:
    bars.append(("on-tc", "step graphs, tensor cores", "tab:orange"))
w = 0.76 / len(bars)
ax = axes[0]
for k, (config, label, color) in enumerate(bars):
    ax.bar([i + (k - (len(bars) - 1) / 2) * w for i in x],
           [value(c, b, config, "device_ms") for c, b in cases], w, label=label, color=color)
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=8)
ax.set_ylabel("device time per step (ms)")
ax.set_title("forward step, ~1.1B BF16 synthetic Llama")
ax.legend(fontsize=8)

ax = axes[1]
shown = bars[1:]
w2 = 0.76 / len(shown)
for k, (config, label, color) in enumerate(shown):
    ax.bar([i + (k - (len(shown) - 1) / 2) * w2 for i in x],
           [100 * value(c, b, config, "fraction_of_copy") for c, b in cases], w2, label=label,
           color=color)
ax.axhline(80, color="k", linestyle="--", label="target for decode: 80%")
ax.set_xticks(list(x))
ax.set_xticklabels(labels, fontsize=8)
ax.set_ylabel("achieved bandwidth, % of D2D copy")
ax.set_title(f"copy bandwidth {report.get('copy_bandwidth_gbs', 0):.0f} GB/s (read + write)")
ax.legend(fontsize=8)

ax = axes[2]
ops = report.get("ops", [])
names = [o["op"] for o in ops if o.get("tokens") == 1 and o["op"] != "layer total"]
w = 0.38
for i, n in enumerate([1, 5]):
    us = []
    for name in names:
        row = next((o for o in ops if o["op"] == name and o.get("tokens") == n), None)
        mult = 16 if row and row.get("per_layer") else 1
        us.append(mult * (row["us"] if row else 0) / 1e3)
    ax.barh([j + (i - 0.5) * w for j in range(len(names))], us, w, label=f"{n} token(s)")
ax.set_yticks(range(len(names)))
ax.set_yticklabels(names, fontsize=8)
ax.set_xlabel("ms per step (per-layer ops x 16)")
ax.set_title("each op alone, in graphs")
ax.legend(fontsize=8)
fig.suptitle(report.get("device", ""), fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print(f"wrote {sys.argv[2]}")
