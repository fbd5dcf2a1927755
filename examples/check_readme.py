"""examples/check_readme.py README EXAMPLE...: fails unless README.md shows each example file's whole
text in one fenced code block, so that the quick starts the README prints are the ones the test
suite builds and runs."""
import re
import sys

readme = open(sys.argv[1], encoding="utf-8").read()
blocks = [b.rstrip("\n") for b in re.findall(r"^```[a-z]*\n(.*?)^```$", readme, flags=re.S | re.M)]
missing = [path for path in sys.argv[2:] if open(path, encoding="utf-8").read().rstrip("\n") not in blocks]
for path in missing:
    print(f"{sys.argv[1]}: no code block equal to {path}; copy the file's text into the README's quick start")
sys.exit(1 if missing else 0)
