"""The package's modules as meson installs them: every python/flashattn/*.py is named in the root
meson.build's install_sources (a module left out installs a package that fails on import, which the
tests of the source tree never see)."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_module_is_installed():
    build = (ROOT / "meson.build").read_text()
    listed = set(re.findall(r"'python/flashattn/([A-Za-z0-9_]+\.py)'", build))
    present = {p.name for p in (ROOT / "python" / "flashattn").glob("*.py")}
    assert present - listed == set(), f"modules not installed by meson.build: {sorted(present - listed)}"
    assert listed - present == set(), f"meson.build installs modules that do not exist: {sorted(listed - present)}"
