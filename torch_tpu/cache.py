"""The persistent compilation cache ($TORCH_TPU_CACHE_DIR, default ~/.cache/torch_tpu)."""
from . import _C


def directory():
    """The folder holding this plugin's compiled programs ("" when the disk cache is off)."""
    return _C._cache_dir()


def root():
    return _C._cache_root()


def clear():
    """Removes every cached program on disk; returns how many files were removed."""
    return _C._cache_clear()
