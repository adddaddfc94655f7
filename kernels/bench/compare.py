#!/usr/bin/env python3
"""Compact comparison from gemm_bench's CSV: per (shape, M), every kernel's median time and TFLOP/s
and its speed relative to the first kernel named (the baseline), with cuBLASLt last.
Usage: compare.py results.csv BASELINE_PREFIX [OTHER_PREFIX...]"""
import collections, csv, sys

rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["what"] != "memcpy"]
prefixes = sys.argv[2:]
groups = collections.OrderedDict()
for r in rows:
    key = (int(r["M"]), int(r["K"]), int(r["N"]) * int(r["S"]))
    groups.setdefault(key, []).append(r)
for key in sorted(groups, key=lambda k: (k[1], k[0])):
    rs = groups[key]
    for what in sorted({r["what"] for r in rs if r["status"] != "lib"}):
        line = [f"{what:>10} M={key[0]:5d}"]
        base = None
        for p in prefixes:
            # the same kernel may have been timed twice (noise check): show every time
            mine = [r for r in rs if r["kernel"].startswith(p) and r["what"] == what]
            for r in mine:
                ms = float(r["ms"])
                if base is None:
                    base = ms
                line.append(f"{p[:22]} {ms:7.4f} ms {float(r['tflops']):5.0f}{'' if r['status'] == 'ok' else ' ' + r['status']}"
                            f" ({base / ms:4.2f}x)")
        lib = [r for r in rs if r["status"] == "lib"]
        if lib and what != "up-nostats":
            line.append(f"cuBLASLt {float(lib[0]['ms']):7.4f} ms {float(lib[0]['tflops']):5.0f}")
        print(" | ".join(line))
