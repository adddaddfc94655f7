#!/usr/bin/env python3
"""Summary of gemm_bench's CSV (all processes of run.sh): per shape, the fastest correct variant of
ours (tensor-core and SIMT), the configuration gemm_host.h recommends, and cuBLASLt."""
import collections, csv, os, re, sys

# gemm_host.h's table: (max_m, name) of the tensor-core configurations, in order
host_h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gemm_host.h")
# fields after the kind: bm bn bk wm wn stages threads min_blocks ctas_per_sm max_m [min_m]
rec = {fam: [(int(f.split(",")[9]) or 1 << 30, n) for n, f in
             re.findall(r'\{"(%s_[^"]+)", FFN_GEMM_%s,([^}]*)\}' % (fam, fam.upper()), open(host_h).read())]
       for fam in ("sm80", "sm90", "sm90p")}
rows = list(csv.DictReader(open(sys.argv[1])))
groups = collections.OrderedDict()
for r in rows:
    if r["what"] == "memcpy":
        print(f"memcpy DtoD 2 GB: {float(r['ms']):.3f} ms = {float(r['gbs_weights']):.0f} GB/s (read+write)")
        continue
    S = int(r["S"])
    key = (int(r["M"]), int(r["K"]), int(r["N"]) * S)
    groups.setdefault(key, []).append(r)

def fmt(r):
    if r is None:
        return f"{'-':>34} {'':>3} {'':>9} {'':>7} {'':>7}"
    return f"{r['kernel'][:34]:>34} {r['splits']:>3} {float(r['ms']):9.4f} {float(r['tflops']):7.1f} {float(r['gbs_weights']):7.0f}"

print(f"{'M':>5} {'K':>6} {'S*N':>6} {'what':>10} | {'fastest of ours (ok)':>34} {'spl':>3} {'ms':>9} {'TFLOP/s':>7} {'GB/s_w':>7} | "
      f"{'cuBLASLt ms':>11} {'TFLOP/s':>7} {'GB/s_w':>7} | wrong")
for key in sorted(groups):
    rs = groups[key]
    M = key[0]
    for fam in ("sm80", "sm90", "sm90p", "simt"):
        # "sm90" is the non-persistent family; "sm90p" the persistent one (gemm_sm90_persistent)
        ours = [r for r in rs if r["kernel"].startswith(fam + "_") and r["what"] not in ("up-nostats",)]
        if not ours:
            continue
        ok = [r for r in ours if r["status"] == "ok"]
        best = min(ok, key=lambda r: float(r["ms"])) if ok else None
        lib = [r for r in rs if r["status"] == "lib"]
        l = min(lib, key=lambda r: float(r["ms"])) if lib and fam in ("sm80", "sm90", "sm90p") else None
        lt = f"{float(l['ms']):11.4f} {float(l['tflops']):7.1f} {float(l['gbs_weights']):7.0f}" if l else f"{'-':>11} {'':>7} {'':>7}"
        wrong = sum(r["status"] != "ok" for r in ours)
        print(f"{key[0]:5d} {key[1]:6d} {key[2]:6d} {ours[0]['what']:>10} | {fmt(best)} | {lt} | {wrong}")
        if fam in ("sm80", "sm90", "sm90p"):
            name = next((n for m, n in rec.get(fam, []) if M <= m), None)
            mine = [r for r in ok if name and r["kernel"].startswith(name + "_s")]
            if mine:
                r = min(mine, key=lambda r: float(r["ms"]))
                print(f"{'':5} {'':6} {'':6} {'table':>10} | {fmt(r)} |")
            ns = [r for r in rs if r["what"] == "up-nostats" and r["status"] == "ok" and r["kernel"].startswith(fam + "_")]
            for r in ns:
                print(f"{'':5} {'':6} {'':6} {'no-stats':>10} | {fmt(r)} |")
