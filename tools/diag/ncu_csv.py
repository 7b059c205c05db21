"""The kernel rows of an Nsight Compute CSV (`ncu --csv --page raw --metrics
gpu__time_duration.sum`): kernel name (parameters cut; template arguments too unless
templates), grid, and microseconds, in launch order. Used by step_ncu.sh and prefill_ncu.sh."""
import csv
import re


def kernels(path, templates=False):
    rows = [r for r in csv.reader(open(path)) if len(r) > 5]
    rows = rows[next((i for i, r in enumerate(rows) if "Kernel Name" in r), len(rows)):]
    if len(rows) < 3:
        return []
    h = rows[0]
    ki, vi, gi = h.index("Kernel Name"), h.index("gpu__time_duration.sum"), h.index("Grid Size")
    sc = 1e-3 if rows[1][vi].startswith("n") else 1.0  # ns -> us
    cut = r"\(.*" if templates else r"[(<].*"
    return [(re.sub(cut, "", r[ki]).replace("void ", "").strip(),
             r[gi].replace(", 1, 1)", ")").replace(" ", ""),
             float(r[vi].replace(",", "")) * sc) for r in rows[2:]]
