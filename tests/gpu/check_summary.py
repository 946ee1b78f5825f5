#!/usr/bin/env python3
"""The GPU check's summary (tests/gpu/check.sh): reads the stage records, the GoogleTest XML
files and the JSON of the oracle, benchmark and peer stages, writes OUT/summary.json and prints a
short table, with the issue's performance targets marked as met or not.

usage: check_summary.py LOGS_DIR OUT_DIR TOTAL_SECONDS
Exit status 0 when every stage exited 0 and no GoogleTest case failed, else 1. Targets missed
are reported, not failed: they are measurements, not correctness checks.
"""
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

logs, out, total_s = sys.argv[1], sys.argv[2], float(sys.argv[3])


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # missing or cut short: say so in the summary
        return {"error": f"{os.path.basename(path)}: {e}"}


stages = []
if os.path.exists(os.path.join(logs, "stages.txt")):
    for line in open(os.path.join(logs, "stages.txt")):
        parts = line.split()
        if len(parts) == 3:
            stages.append({"stage": parts[0], "exit": int(parts[1]), "seconds": int(parts[2])})

gtests = {}
for path in sorted(glob.glob(os.path.join(logs, "*.xml"))):
    name = os.path.basename(path)[:-4]
    try:
        root = ET.parse(path).getroot()
        cases = root.findall(".//testcase")
        failed = [c.get("classname", "") + "." + c.get("name", "") for c in cases
                  if c.find("failure") is not None or c.find("error") is not None]
        skipped = [c.get("classname", "") + "." + c.get("name", "") for c in cases
                   if c.get("result") == "skipped" or c.find("skipped") is not None]
        gtests[name] = {"tests": len(cases), "failed": failed, "skipped": skipped,
                        "passed": len(cases) - len(failed) - len(skipped)}
    except Exception as e:
        gtests[name] = {"error": str(e), "failed": ["(unreadable XML)"]}

e2e = []
e2e_log = os.path.join(logs, "e2e.log")
if os.path.exists(e2e_log):
    for line in open(e2e_log, errors="replace"):
        m = re.match(r"(\w+): (\d+) prompts, speculative == baseline for (\d+), tau ([\d.]+)", line)
        if m:
            e2e.append({"case": m.group(1), "prompts": int(m.group(2)),
                        "equal": int(m.group(3)), "tau": float(m.group(4))})
        m = re.match(r"(\w+): GPU greedy == CPU greedy for (\d+) of (\d+) prompts", line)
        if m:
            e2e.append({"case": m.group(1) + " gpu==cpu", "equal": int(m.group(2)),
                        "prompts": int(m.group(3))})

g1 = os.path.join(logs, "gpu_vs_cpu_1b.log")
if os.path.exists(g1):
    for line in open(g1, errors="replace"):
        m = re.match(r"GPU greedy == CPU greedy for (\d+) of (\d+) prompts", line)
        if m:
            e2e.append({"case": "model-1b gpu==cpu", "equal": int(m.group(1)),
                        "prompts": int(m.group(2))})

bench = load_json(os.path.join(out, "bench.json"))
oracle = load_json(os.path.join(out, "oracle.json"))
if os.path.exists(os.path.join(logs, "oracle_1b.json")):  # the ~1.1B model, after the benchmark
    o1 = load_json(os.path.join(logs, "oracle_1b.json"))
    if isinstance(oracle, dict) and isinstance(o1, dict):
        oracle.setdefault("models", []).extend(o1.get("models", []))
        oracle["pass"] = bool(oracle.get("pass")) and bool(o1.get("pass"))
peer = load_json(os.path.join(out, "peer.json"))


def step(case, batch, graphs, config=None):
    for s in bench.get("steps", []):
        # Step graphs as a job runs them by default ("on"; the variants beside them have other
        # labels, e.g. "on-tc" with the projections on the tensor cores; files before the
        # variants have none).
        want = config or ("on" if graphs else "off")
        if (s.get("case") == case and s.get("batch") == batch and s.get("graphs") == graphs and
                s.get("config", "on" if graphs else "off") == want):
            return s
    return None


targets = []


def target(name, value, goal, ok):
    targets.append({"target": name, "value": value, "goal": goal,
                    "met": None if value is None else bool(ok)})


d = step("decode", 1, True)
target("decode batch 1 achieved bandwidth / copy bandwidth", d and d["fraction_of_copy"], ">= 0.80",
       d and d["fraction_of_copy"] >= 0.80)
v = bench.get("verify_over_decode_batch1")
target("verify (k+1 = 5) / decode, batch 1", v, "<= 1.15", v is not None and v <= 1.15)
# The same two with the projections on the tensor cores (parallel.cuda_tensor_cores), if measured.
d = step("decode", 1, True, "on-tc")
if d:
    target("decode batch 1 achieved bandwidth / copy bandwidth, tensor cores",
           d["fraction_of_copy"], ">= 0.80", d["fraction_of_copy"] >= 0.80)
v = bench.get("verify_over_decode_batch1_tensor_cores")
if v is not None:
    target("verify (k+1 = 5) / decode, batch 1, tensor cores", v, "<= 1.15", v <= 1.15)
r = (peer.get("ratios") or {}).get("specrun_baseline_over_hf_greedy") if isinstance(peer, dict) else None
target("specrun decode tokens/s / transformers greedy", r, ">= 3", r is not None and r >= 3)
ins = (bench.get("instrumentation") or {}).get("overhead_fraction")
target("phase timing overhead (fraction of a decode step)", ins, "< 0.01",
       ins is not None and ins < 0.01)

failed_stages = [s["stage"] for s in stages if s["exit"] != 0]
failed_tests = sorted(t for g in gtests.values() for t in g.get("failed", []))


def failure_excerpt(stage):
    """What a failed stage's log says, kept in summary.json (the one file sure to come back
    and be committed): compute-sanitizer's reports (its first 60 lines and the ERROR SUMMARY),
    GoogleTest's failures, else the log's last 30 lines."""
    path = os.path.join(logs, stage + ".log")
    if not os.path.exists(path):
        return ["(no log)"]
    lines = open(path, errors="replace").read().splitlines()
    if stage.startswith("memcheck"):
        reports = [l for l in lines if l.startswith("=========")]
        totals = [l for l in reports if "ERROR SUMMARY" in l]
        if reports:
            return reports[:60] + [l for l in totals if l not in reports[:60]]
    failures = [l for l in lines if "Failure" in l or l.startswith("[  FAILED  ]") or
                l.startswith("FAIL")]
    return (failures[:30] + ["..."] + lines[-15:]) if failures else lines[-30:]


failure_logs = {s: failure_excerpt(s) for s in failed_stages}
summary = {
    "total_seconds": total_s,
    "pass": not failed_stages and not failed_tests,
    "failed_stages": failed_stages,
    "failed_tests": failed_tests,
    "failure_logs": failure_logs,
    "stages": stages,
    "gtest": gtests,
    "e2e": e2e,
    "oracle": {k: oracle.get(k) for k in ("pass", "error")} | {
        "models": [{k: m.get(k) for k in ("model", "oracle_used", "rel_l2_max", "rel_l2_median",
                                           "greedy_equal", "greedy_total", "near_ties", "pass")}
                   | {"oracles": {o: {k: v.get(k) for k in ("ran", "dtype", "device", "rel_l2_max",
                                                            "rel_l2_median", "greedy_equal",
                                                            "greedy_total", "pass", "errors")}
                                  for o, v in (m.get("oracles") or {}).items()}}
                   for m in oracle.get("models", []) if isinstance(m, dict)]}
    if isinstance(oracle, dict) else oracle,
    "targets": targets,
    "bench": bench,
    "peer": peer,
}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2, default=str)

print("== summary")
for s in stages:
    print(f"  {s['stage']:<32} exit {s['exit']:>3}  {s['seconds']:>4} s")
for name, g in gtests.items():
    print(f"  {name:<32} {g.get('passed', 0)} passed, {len(g.get('failed', []))} failed, "
          f"{len(g.get('skipped', []))} skipped")
for t in failed_tests:
    print(f"  FAILED {t}")
for stage, excerpt in failure_logs.items():
    print(f"  {stage} failed; its log says:")
    for line in excerpt[:8]:
        print(f"    | {line[:160]}")
for e in e2e:
    print(f"  e2e {e['case']:<26} {e['equal']}/{e['prompts']} equal" +
          (f", tau {e['tau']:.2f}" if "tau" in e else ""))
for m in summary["oracle"].get("models", []) if isinstance(summary["oracle"], dict) else []:
    for o, v in (m.get("oracles") or {}).items():
        if v.get("ran"):
            print(f"  oracle {o:<4} {os.path.basename(str(m.get('model'))):<22} rel L2 max "
                  f"{v.get('rel_l2_max')}, greedy {v.get('greedy_equal')}/{v.get('greedy_total')}, "
                  f"pass {v.get('pass')}")
        else:
            print(f"  oracle {o:<4} {os.path.basename(str(m.get('model'))):<22} did not run: "
                  f"{(v.get('errors') or ['?'])[0][:100]}")
for t in targets:
    state = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
    val = "-" if t["value"] is None else f"{t['value']:.3f}"
    print(f"  target {t['target']:<52} {val:>8} ({t['goal']}): {state}")
sys.exit(0 if summary["pass"] else 1)
