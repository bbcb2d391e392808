#!/usr/bin/env python3
"""compare.py JUNIT_XML XFAIL_FILE — llama.cpp's server tests' outcomes against the list of
expected failures (tests/integration/llama_server_xfail.txt).

XFAIL_FILE: one test per line, `ID | REASON` (the id as pytest names it:
unit/test_basic.py::test_server_props, parameters included; split at the last " | ");
blank lines and lines starting with '#' are comments. A REASON that starts with "flaky:" marks
a test whose outcome depends on a draw (a request without a seed): either outcome is accepted.

Exit 0 when the failures are exactly the listed tests. Exit 1, saying which, when
  - a test failed (or errored) that is not listed: a new failure;
  - a listed test passed: the list must be trimmed (kept honest, so fixed tests stay fixed);
  - a listed test was not run at all: a stale entry.
Prints the counts: passed, failed (listed), skipped.
"""
import sys
import xml.etree.ElementTree as ET


def test_id(case):
    # classname "unit.test_basic" (or "tests.unit.test_basic"), name "test_x[params]".
    cls = case.get("classname", "")
    parts = cls.split(".")
    while parts and parts[0] != "unit":
        parts.pop(0)
    mod = "/".join(parts) if parts else cls.replace(".", "/")
    return f"{mod}.py::{case.get('name', '')}"


def outcomes(path, details):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags:
            out[test_id(case)] = "failed"
            why = next(c for c in case if c.tag in ("failure", "error"))
            details[test_id(case)] = (why.text or why.get("message") or "").splitlines()
        elif "skipped" in tags:
            out[test_id(case)] = "skipped"
        else:
            out[test_id(case)] = "passed"
    return out


def expected(path):
    listed = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if " | " not in line:
                sys.exit(f"{path}:{n}: expected 'ID | REASON', got: {line}")
            tid, reason = line.rsplit(" | ", 1)
            if tid in listed:
                sys.exit(f"{path}:{n}: {tid} is listed twice")
            listed[tid.strip()] = reason.strip()
    return listed


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py JUNIT_XML XFAIL_FILE")
    details = {}
    got = outcomes(sys.argv[1], details)
    listed = expected(sys.argv[2])
    new = sorted(t for t, o in got.items() if o == "failed" and t not in listed)
    fixed = sorted(t for t in listed
                   if got.get(t) == "passed" and not listed[t].startswith("flaky:"))
    stale = sorted(t for t in listed if t not in got)
    count = {o: sum(1 for v in got.values() if v == o) for o in ("passed", "failed", "skipped")}
    print(f"llama-server tests: {count['passed']} passed, {count['failed']} failed "
          f"({count['failed'] - len(new)} of them listed), {count['skipped']} skipped")
    for t in new:
        print(f"NEW FAILURE (not in the list): {t}")
        for line in details.get(t, [])[-30:]:
            print(f"    {line}")
    for t in fixed:
        print(f"NOW PASSES (remove it from the list): {t}  [{listed[t]}]")
    for t in stale:
        print(f"NOT RUN (a stale entry of the list): {t}")
    return 1 if new or fixed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
