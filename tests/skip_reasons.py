"""tests/skip_reasons.py BUILD [STATUS]: prints why each test of the last `meson test -C BUILD` run
was skipped, then exits with STATUS (meson test's exit status, 0 by default).

meson test (1.0) reports a test that exits with status 77 as SKIP on screen and keeps its output
in BUILD/meson-logs/testlog.txt only; --print-errorlogs shows failures, not skips. This reads
BUILD/meson-logs/testlog.json (one JSON object per test) and prints one line per skipped test: its
name and the last line it printed (every skipping test prints its reason last). For a test that
passed with skipped cases inside (pytest's `-rs` summary: `SKIPPED [n] file:line: reason`), one
line per such summary line. The README's test command runs it after meson test:

    meson test -C build --print-errorlogs; python3 tests/skip_reasons.py build $?
"""
import json
import os
import sys
import time


def last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    build = argv[1]
    status = int(argv[2]) if len(argv) == 3 else 0
    path = os.path.join(build, "meson-logs", "testlog.json")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            results = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        print(f"skip reasons: cannot read {path} ({e.strerror}): has meson test run in {build}?")
        return status
    lines = []
    for r in results:
        name = r.get("name", "?")
        out, err = r.get("stdout") or r.get("output") or "", r.get("stderr") or ""
        if r.get("result") == "SKIP":
            reason = last_line(err) or last_line(out) or "(the test printed no reason)"
            lines.append(f"SKIP {name}: {reason}")
        else:
            for line in (out + "\n" + err).splitlines():
                if line.startswith("SKIPPED ["):
                    lines.append(f"skipped cases in {name}: {line[len('SKIPPED '):].strip()}")
    # the time says which run the log is from (a meson test that stopped at its rebuild writes none)
    written = time.strftime("%H:%M:%S", time.localtime(os.path.getmtime(path)))
    if lines:
        print(f"Skip reasons ({path}, written {written}):")
        for line in lines:
            print("  " + line)
    else:
        print(f"Skip reasons: no test skipped ({path}, written {written})")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
