"""One version: VERSION at the top of the tree, read by meson.build (which checks the C header's
FA_VERSION_* against it) and by meson-python for the package metadata. The package's __version__,
the loaded library's fa_version() and, where the package is installed, its metadata must agree."""
import importlib.metadata
import os

import flashattn


def test_package_version_is_the_library_version():
    assert flashattn.__version__ == flashattn.library_version()


def test_package_version_is_the_metadata_or_the_tree_file():
    package_dir = os.path.dirname(os.path.abspath(flashattn.__file__))
    tree_file = os.path.join(package_dir, os.pardir, os.pardir, "VERSION")
    if os.path.isfile(tree_file):  # run from the source tree (meson test's python-pytest)
        with open(tree_file, encoding="ascii") as f:
            assert flashattn.__version__ == f.read().strip()
    else:  # installed by pip: the metadata meson-python wrote from VERSION
        assert flashattn.__version__ == importlib.metadata.version("flashattn")
