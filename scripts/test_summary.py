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
    passed = failed = skipped = 0
    notes = []
    for entry in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        name = entry.get("name", "")
        entry_failed = failed_case(entry)
        shard = SHARD.match(name)
        if not shard or shard_dir is None:
            if entry_failed:
                failed += 1
                notes.append(f"failed: {name}")
            elif skipped_case(entry):
                skipped += 1
            else:
                passed += 1
            continue
        path = os.path.join(shard_dir, f"shard_{int(shard.group(1)) - 1}.xml")
        try:
            cases = list(ET.parse(path).getroot().iter("testcase"))
        except (OSError, ET.ParseError) as e:
            failed += 1
            notes.append(f"failed: {name} wrote no test results ({e}): it crashed or timed out")
            continue
        shard_failures = 0
        for case in cases:
            test = f"{case.get('classname')}.{case.get('name')}"
            if failed_case(case):
                failed += 1
                shard_failures += 1
                notes.append(f"failed: {test}")
            elif skipped_case(case):
                skipped += 1
            else:
                passed += 1
        if entry_failed and shard_failures == 0:
            failed += 1
            notes.append(f"failed: {name} exited with an error after its tests passed "
                         "(a sanitizer's report at exit, or a crash in teardown): see its output")
    print(f"ctest: {passed} passed, {failed} failed, {skipped} skipped")
    for note in notes:
        print(f"  {note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
