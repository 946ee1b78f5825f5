#!/usr/bin/python3
"""Figure of the GPU benchmark (tests/unit/test_cuda_bench.cpp): step time and achieved memory
bandwidth of decode (1 token per sequence) and verify (5 tokens) at batch 1 and 8, with the
measured copy bandwidth as the reference line.

usage: plot_bench.py BENCH.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

report = json.load(open(sys.argv[1]))
steps = report["steps"]
labels = [f"B={s['batch']}\n{'decode' if s['tokens_per_sequence'] == 1 else 'verify k+1=' + str(s['tokens_per_sequence'])}" for s in steps]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
ax1.bar(labels, [s["step_ms"] for s in steps], color="tab:blue")
ax1.set_ylabel("step time (ms)")
ax1.set_title("forward step, ~1.1B BF16 synthetic model")
ax2.bar(labels, [s["achieved_gbs"] for s in steps], color="tab:green")
ax2.axhline(report["copy_bandwidth_gbs"], color="k", linestyle="--", label="D2D copy bandwidth")
ax2.set_ylabel("achieved GB/s (weights + KV read / step time)")
ax2.legend()
fig.suptitle(report["device"], fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
print(f"wrote {sys.argv[2]}")
