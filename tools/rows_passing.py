#!/usr/bin/env python3
"""Compares which benchmark rows pass in two result folders (`bench all` + `compare all` output).

A refactor of the benchmark suite must leave the same rows passing. This reads every suite JSON
of both folders and says, row by row, where the verdict changed:
- a `bench` row passes when its accuracy check passed (rows without a check only have to exist);
- a `compare all` row passes when it produced a time (peers that ran out of memory, or were not
  run, have none).
Rows present in only one folder are listed apart (a --quick run has fewer rows than a full one).

    tools/rows_passing.py OLD_RESULTS NEW_RESULTS
Exit status 1 when a row present in both folders passes in OLD and not in NEW.
"""
import json
import sys
from pathlib import Path


def bench_verdicts(doc):
    out = {}
    for row in doc.get("rows", []):
        key = (row.get("name"), json.dumps(row.get("params"), sort_keys=True))
        acc = row.get("accuracy")
        if isinstance(acc, dict):
            out[key] = bool(acc.get("passed")) and acc.get("other_checks_passed") is not False
        else:
            out[key] = True  # no check: the row exists, it timed something
    return out


def compare_verdicts(doc):
    out = {}
    for row in doc.get("rows", []):
        key = (row.get("comparison"), row.get("case"), row.get("implementation"))
        out[key] = row.get("median_ms") is not None
    return out


def verdicts(folder):
    out = {}
    for path in sorted(Path(folder).glob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            continue
        rows = compare_verdicts(doc) if path.stem == "compare_all" else bench_verdicts(doc)
        out.update({(path.stem,) + key: ok for key, ok in rows.items()})
    return out


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    old, new = verdicts(argv[1]), verdicts(argv[2])
    both = sorted(set(old) & set(new), key=str)
    regressed = [k for k in both if old[k] and not new[k]]
    fixed = [k for k in both if new[k] and not old[k]]
    files = sorted({k[0] for k in both})
    for f in files:
        rows = [k for k in both if k[0] == f]
        passing = sum(new[k] for k in rows)
        print(f"{f:24} {len(rows):4} rows in both, {passing:4} pass in new, "
              f"{sum(old[k] for k in rows):4} in old")
    print(f"only in old: {len(set(old) - set(new))} rows, only in new: {len(set(new) - set(old))}")
    for k in sorted(set(new) - set(old), key=str):
        print("  new row:", " | ".join(str(p) for p in k), "pass" if new[k] else "FAIL")
    for k in fixed:
        print("  now passes:", " | ".join(str(p) for p in k))
    for k in regressed:
        print("  REGRESSED:", " | ".join(str(p) for p in k))
    print(f"{len(both)} rows in both: {len(regressed)} regressed, {len(fixed)} now pass")
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
