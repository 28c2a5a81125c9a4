#!/usr/bin/env python3
"""Prints one closing line for a ctest JUnit file: 'ctest: N passed, N failed, N skipped'."""
import sys
import xml.etree.ElementTree as ET

cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
passed = failed = skipped = 0
for case in cases:
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
    elif case.find("skipped") is not None or case.get("status") == "notrun":
        skipped += 1
    else:
        passed += 1
print(f"ctest: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
