"""examples/check_readme.py README EXAMPLE...: fails unless README.md links each example file (a
relative markdown link to it) and every relative link in the README names a file or folder that
exists, so that the quick starts the README points to are the ones the test suite builds and runs;
and that .ci/run (where it exists beside the README) runs the README's test command (the line of
its shell blocks that starts with `meson test`) as written."""
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
ci = os.path.join(root, ".ci", "run")
if os.path.exists(ci):
    ci_text = open(ci, encoding="utf-8").read()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("meson test")]
    if not commands:
        print(f"{readme}: no `meson test` command in a sh block")
        failed = True
    for command in commands:
        if command not in ci_text:
            print(f"{readme}: .ci/run does not run the README's test command `{command}` (keep the two in sync)")
            failed = True
sys.exit(1 if failed else 0)
