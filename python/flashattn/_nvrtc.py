"""_nvrtc.py: the NVRTC that the CUDA backend of a run-time compiled build (-Dcuda-kernels=rtc)
compiles its kernels with, found among the Python packages where the machine has no CUDA toolkit:
NVIDIA's nvidia-cuda-nvrtc wheels (CUDA 13's nvidia/cu13/lib, CUDA 12's nvidia/cuda_nvrtc/lib),
which PyTorch's CUDA builds install, and PyTorch's own lib folder. The library reads
FLASHATTN_NVRTC_LIBRARY when it first compiles; this module sets it, before the library is
loaded, to the first NVRTC found, unless the user set it. The library's own search (the loader's
path, a toolkit's folders) follows where none is found here."""
import glob
import os
import sys

# (folder under a site directory, file pattern), newest CUDA first
_LAYOUTS = [(os.path.join("nvidia", "cu13", "lib"), "libnvrtc.so.13"),
            (os.path.join("nvidia", "cuda_nvrtc", "lib"), "libnvrtc.so.12"),
            (os.path.join("torch", "lib"), "libnvrtc*.so*")]


def find(paths=None):
    """The first NVRTC library in the layouts above under each of paths (default sys.path), or None."""
    for layout, pattern in _LAYOUTS:
        for site in (sys.path if paths is None else paths):
            if not site or not os.path.isdir(site):
                continue
            for name in sorted(glob.glob(os.path.join(site, layout, pattern))):
                if "builtins" not in os.path.basename(name) and os.path.isfile(name):
                    return name
    return None


def point_library_at_wheel_nvrtc(paths=None):
    """Sets FLASHATTN_NVRTC_LIBRARY to find(paths) where it is unset; returns what it is then."""
    if not os.environ.get("FLASHATTN_NVRTC_LIBRARY"):
        found = find(paths)
        if found:
            os.environ["FLASHATTN_NVRTC_LIBRARY"] = found
    return os.environ.get("FLASHATTN_NVRTC_LIBRARY")
