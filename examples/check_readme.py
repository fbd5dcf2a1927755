"""examples/check_readme.py README EXAMPLE...: fails unless README.md links each example file (a
relative markdown link to it) and every relative link in the README names a file or folder that
exists, so that the quick starts the README points to are the ones the test suite builds and runs."""
import os
import re
import sys

readme = sys.argv[1]
root = os.path.dirname(os.path.abspath(readme))
text = open(readme, encoding="utf-8").read()
links = [m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text)]
relative = [link for link in links if link and not re.match(r"[a-z]+:", link)]

failed = False
for path in sys.argv[2:]:
    target = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
    if target not in relative:
        print(f"{readme}: no link to {target}; the quick start must point at the example the tests run")
        failed = True
for link in relative:
    if not os.path.exists(os.path.join(root, link)):
        print(f"{readme}: the link {link} names nothing that exists")
        failed = True
sys.exit(1 if failed else 0)
