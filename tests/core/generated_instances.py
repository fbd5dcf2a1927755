#!/usr/bin/env python3
"""generated-instances: the committed kernel instances and dispatch tables are exactly what
backends/cuda/generate_instances.py writes. Runs the generator into a temporary folder and compares
every file it writes with the source tree's copy: a hand edit to a generated file, or a table
changed without regenerating, fails here with the first differing lines.
Usage: generated_instances.py SOURCE_ROOT"""
import difflib
import os
import subprocess
import sys
import tempfile

# the five families write 49 files today; far fewer means the generator lost a family
MIN_FILES = 40


def main():
    root = sys.argv[1]
    generator = os.path.join(root, "backends", "cuda", "generate_instances.py")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, generator, "--root", tmp], check=True)
        written, differing = 0, []
        for dirpath, _, names in os.walk(tmp):
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(dirpath, name), tmp)
                written += 1
                with open(os.path.join(tmp, rel)) as f:
                    generated = f.read()
                committed_path = os.path.join(root, rel)
                committed = open(committed_path).read() if os.path.exists(committed_path) else None
                if committed != generated:
                    differing.append(rel)
                    if committed is None:
                        print(f"{rel}: generated, but not in the source tree")
                    else:
                        diff = difflib.unified_diff(committed.splitlines(), generated.splitlines(),
                                                    f"{rel} (committed)", f"{rel} (generated)", lineterm="")
                        print("\n".join(list(diff)[:20]))
    if written < MIN_FILES:
        print(f"the generator wrote {written} files, expected at least {MIN_FILES}")
        return 1
    if differing:
        print(f"{len(differing)} of {written} generated files differ from the source tree: run "
              "python3 backends/cuda/generate_instances.py and commit the result")
        return 1
    print(f"all {written} generated files match the source tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
