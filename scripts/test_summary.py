#!/usr/bin/env python3
"""Prints one closing line for a ctest run: 'ctest: N passed, N failed, N skipped', counting tests.

Usage: test_summary.py CTEST_JUNIT_XML [GTEST_SHARD_DIR]

ctest runs braid_tests as shards (tests/CMakeLists.txt: braid_tests_shard_I_of_N, each writing
GTEST_SHARD_DIR/shard_{I-1}.xml); every other ctest entry (braid_c_smoke) is one test. A shard
counts its gtest tests; a shard that failed without a failed test in its file (it crashed, hung,
or a sanitizer reported at exit) counts as one more failure, named below the line.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

SHARD = re.compile(r"^braid_tests_shard_(\d+)_of_(\d+)$")


def failed_case(case):
    return case.find("failure") is not None or case.find("error") is not None


def skipped_case(case):
    return (case.find("skipped") is not None or case.get("status") == "notrun"
            or case.get("result") == "skipped")


def main():
    shard_dir = sys.argv[2] if len(sys.argv) > 2 else None
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    notes = []

    def count(case, name):  # returns whether the case failed
        outcome = "failed" if failed_case(case) else "skipped" if skipped_case(case) else "passed"
        counts[outcome] += 1
        if outcome == "failed":
            notes.append(f"failed: {name}")
        return outcome == "failed"

    for entry in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        name = entry.get("name", "")
        shard = SHARD.match(name)
        if not shard or shard_dir is None:
            count(entry, name)
            continue
        path = os.path.join(shard_dir, f"shard_{int(shard.group(1)) - 1}.xml")
        try:
            cases = list(ET.parse(path).getroot().iter("testcase"))
        except (OSError, ET.ParseError) as e:
            counts["failed"] += 1
            notes.append(f"failed: {name} wrote no test results ({e}): it crashed or timed out")
            continue
        shard_failures = sum(count(c, f"{c.get('classname')}.{c.get('name')}") for c in cases)
        if failed_case(entry) and shard_failures == 0:
            counts["failed"] += 1
            notes.append(f"failed: {name} exited with an error after its tests passed "
                         "(a sanitizer's report at exit, or a crash in teardown): see its output")
    passed, failed, skipped = counts["passed"], counts["failed"], counts["skipped"]
    print(f"ctest: {passed} passed, {failed} failed, {skipped} skipped")
    for note in notes:
        print(f"  {note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
