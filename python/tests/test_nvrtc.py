"""The NVRTC of NVIDIA's wheels found for the run-time compiled CUDA backend (flashattn/_nvrtc.py):
the layouts in order, CUDA 13 before 12 before PyTorch's folder, the builtins library never taken,
and FLASHATTN_NVRTC_LIBRARY set only where the user has not set it."""
import os

from flashattn import _nvrtc


def touch(root, *parts):
    path = os.path.join(root, *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").close()
    return path


def test_none_found(tmp_path):
    assert _nvrtc.find([str(tmp_path), str(tmp_path / "missing")]) is None


def test_layouts_in_order(tmp_path):
    site_a, site_b = str(tmp_path / "a"), str(tmp_path / "b")
    torch_lib = touch(site_a, "torch", "lib", "libnvrtc-abc123.so.12")
    touch(site_a, "torch", "lib", "libnvrtc-builtins-abc123.so.12.8")
    assert _nvrtc.find([site_a, site_b]) == torch_lib
    cu12 = touch(site_b, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")
    assert _nvrtc.find([site_a, site_b]) == cu12  # the wheel's layout before PyTorch's folder
    cu13 = touch(site_b, "nvidia", "cu13", "lib", "libnvrtc.so.13")
    touch(site_a, "nvidia", "cu13", "lib", "libnvrtc-builtins.so.13.0")
    assert _nvrtc.find([site_a, site_b]) == cu13


def test_builtins_alone_is_not_nvrtc(tmp_path):
    touch(str(tmp_path), "torch", "lib", "libnvrtc-builtins.so.12.8")
    assert _nvrtc.find([str(tmp_path)]) is None


def test_environment_set_only_when_unset(tmp_path, monkeypatch):
    found = touch(str(tmp_path), "nvidia", "cu13", "lib", "libnvrtc.so.13")
    monkeypatch.delenv("FLASHATTN_NVRTC_LIBRARY", raising=False)
    assert _nvrtc.point_library_at_wheel_nvrtc([str(tmp_path)]) == found
    assert os.environ["FLASHATTN_NVRTC_LIBRARY"] == found
    monkeypatch.setenv("FLASHATTN_NVRTC_LIBRARY", "/opt/mine/libnvrtc.so")
    assert _nvrtc.point_library_at_wheel_nvrtc([str(tmp_path)]) == "/opt/mine/libnvrtc.so"
    monkeypatch.delenv("FLASHATTN_NVRTC_LIBRARY")
    assert _nvrtc.point_library_at_wheel_nvrtc([str(tmp_path / "empty")]) is None
    assert "FLASHATTN_NVRTC_LIBRARY" not in os.environ
