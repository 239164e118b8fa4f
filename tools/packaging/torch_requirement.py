"""The wheel's `dependencies`, written at build time (a scikit-build-core metadata provider).

torch_tpu/_C links against libtorch's C++ ABI, which changes between PyTorch releases, so a
built torch_tpu works with the release it was compiled against only: its wheel requires
torch==X.Y.* of the PyTorch installed where it is built (the build imports that torch). The
releases torch_tpu can be built against are a range in pyproject.toml (`supported-torch`); a
build against another one stops here, before compiling, with both named.
"""
import importlib.metadata

from packaging.specifiers import SpecifierSet
from packaging.version import Version


def requirements(supported, installed, others):
    """The dependency list for a build against PyTorch `installed` (a version string)."""
    release = Version(installed)
    if not SpecifierSet(supported).contains(Version(release.base_version), prereleases=True):
        raise RuntimeError(f"torch_tpu builds against PyTorch {supported} (pyproject.toml), but PyTorch "
                           f"{installed} is installed")
    return [f"torch=={release.major}.{release.minor}.*", *others]


def dynamic_metadata(field, settings):
    if field != "dependencies":
        raise RuntimeError(f"{__name__} provides `dependencies` only, not {field!r}")
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("building torch_tpu needs the PyTorch it will run with, installed: install torch, "
                           "then build without build isolation (pip install --no-build-isolation ...)") from None
    return requirements(settings["supported-torch"], installed, settings.get("others", []))
