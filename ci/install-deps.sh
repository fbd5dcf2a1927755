#!/usr/bin/env bash
# Installs what building and testing flashattn needs on Debian 12, from Debian's packages only.
# Used by .ci/run; safe to run by hand (as root or with sudo).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential meson ninja-build pkg-config libcmocka-dev python3 python3-numpy python3-pytest python3-hypothesis python3-venv \
  ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd hipcc clang libclang-rt-14-dev pypy3 >/dev/null
# python3-pytest runs the Python package's suite under meson test (python3-hypothesis: its
# property-based tests); python3-venv lets CI check
# `pip install .` in a fresh virtual environment (its build tools come from PyPI). Debian 12 has
# no ml_dtypes (bfloat16 NumPy arrays): meson's python-pytest run reports the bf16 cases as
# skipped, with that reason; .ci/run's pip environment installs it with the test extra
# (pyproject.toml) and there a missing ml_dtypes fails (FA_TEST_REQUIRE_ML_DTYPES=1).
# ocl-icd-opencl-dev + opencl-c-headers build the OpenCL backend; pocl-opencl-icd (PoCL, a CPU
# OpenCL platform) lets CI run its conformance grid without a GPU; hipcc (ROCm 5.2, clang 15 and
# LLVM 15's tools, libamdhip64) builds the HIP backend and lets tests/hip inspect its code objects
# clang and libclang-rt-14-dev (libFuzzer's runtime) build the fuzz targets of tests/fuzz as libFuzzer
# targets in .ci/run; pypy3 (PyPy 7.3, Python 3.9) is the second Python the wheel is installed into
