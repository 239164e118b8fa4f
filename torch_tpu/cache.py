"""The persistent compilation cache ($TORCH_TPU_CACHE_DIR, default ~/.cache/torch_tpu).

Under the root, one folder per plugin (platform, plugin version, PJRT API version) holds one
`<key>.bin` file per compiled program (DESIGN.md "Compilation cache")."""
import os

from . import _C


def directory():
    """The folder holding this plugin's compiled programs ("" when the disk cache is off)."""
    return _C._cache_dir()


def root():
    """The cache root ("" when the disk cache is off); reading it never starts the device."""
    return _C._cache_root()


def clear():
    """Removes every cached program on disk; returns how many files were removed."""
    return _C._cache_clear()


def usage(folder=None):
    """(entries, bytes) of the compiled programs under `folder` (default: the whole root)."""
    folder = root() if folder is None else folder
    entries = size = 0
    for parent, _, files in os.walk(folder) if folder else ():
        for name in files:
            if name.endswith(".bin"):
                try:
                    size += os.path.getsize(os.path.join(parent, name))
                except OSError:  # evicted by another process meanwhile
                    continue
                entries += 1
    return entries, size


def folders():
    """{plugin folder name: (entries, bytes)} under the root, for each plugin that compiled here."""
    base = root()
    if not base or not os.path.isdir(base):
        return {}
    return {name: usage(os.path.join(base, name)) for name in sorted(os.listdir(base))
            if os.path.isdir(os.path.join(base, name))}
