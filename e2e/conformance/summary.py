#!/usr/bin/env python3
"""Summarises e2e.test's JUnit report: prints `N passed, N failed, N
skipped` over the tests the run focused on (ginkgo reports every spec of
the suite, those its focus left out as skipped), and writes each failure
with the first line of its error to FAILURES.

usage: summary.py JUNIT FAILURES WALL_SECONDS FOCUS_REGEXP
"""
import re
import sys
import xml.etree.ElementTree as ET


def main():
    junit, failures_path, wall, focus = sys.argv[1:5]
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"summary: no report: {e}", file=sys.stderr)
        print("0 passed, 1 failed, 0 skipped")
        return
    focus_re = re.compile(focus)
    passed, failed, skipped = 0, [], 0
    for tc in root.iter("testcase"):
        name = tc.get("name", "")
        # The suite's own nodes ([SynchronizedBeforeSuite] and the like)
        # count only when they fail.
        status = tc.get("status", "")
        is_test = focus_re.search(name) is not None
        fail = tc.find("failure")
        if fail is None:
            fail = tc.find("error")
        if fail is not None or status in ("failed", "panicked", "interrupted", "timedout", "aborted"):
            msg = (fail.get("message") or fail.text or "") if fail is not None else status
            lines = [l.strip() for l in msg.splitlines() if l.strip()]
            first = lines[0] if lines else status
            if len(first) < 40 and len(lines) > 1:
                # gomega's "Expected" alone says nothing: add what follows.
                first = " ".join(lines[:6])[:240]
            failed.append((name, first))
        elif not is_test:
            continue
        elif tc.find("skipped") is not None or status in ("skipped", "pending"):
            skipped += 1
        else:
            passed += 1
    with open(failures_path, "w") as f:
        for name, first in failed:
            f.write(f"{name}\n    {first}\n")
    print(f"wall time {int(wall) // 60}m{int(wall) % 60:02d}s")
    if passed + len(failed) == 0:
        # A focus that matches nothing proves nothing.
        failed.append(("(no test ran)", f"the focus {focus!r} matched no test that ran"))
        with open(failures_path, "a") as f:
            f.write(f"{failed[-1][0]}\n    {failed[-1][1]}\n")
    print(f"conformance: {passed} passed, {len(failed)} failed, {skipped} skipped")


if __name__ == "__main__":
    main()
