"""The documentation is tested like code.

- Every ```python block of README.md and docs/*.md runs: one fresh interpreter per file, its
  blocks in order in one namespace, offline (HF_HUB_OFFLINE=1). A block that cannot run here
  (a TPU, a GPU, a second host) is fenced as ```python-norun instead.
- docs/design.md names every folder under csrc/, and every csrc/ folder it names exists.
- README.md stays short; links between the docs reach files and headings that exist.
- docs/env.md names every TORCH_TPU_* variable the code reads, and the docs name no variable
  and no torch.tpu / torch_tpu API that does not exist.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mode_independent("docs run in their own processes and set their own modes")

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DOC_FILES = [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))

# csrc/aten is being split into these folders; design.md describes that layout, so they are
# accepted before they exist in a checkout (and required once they do, like every folder).
ATEN_FOLDERS = {"csrc/aten/dispatch", "csrc/aten/storage", "csrc/aten/compiled", "csrc/aten/distributed"}

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(path):
    """The ```python blocks of a Markdown file, in order (other fences are not run)."""
    return [body for lang, body in FENCE.findall(path.read_text()) if lang.strip() == "python"]


def _id(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", [p for p in DOC_FILES if python_blocks(p)], ids=_id)
def test_python_blocks_run(path, tmp_path):
    blocks = python_blocks(path)
    # One namespace for the file's blocks, each compiled under its own name, so a traceback
    # says which block failed.
    program = "\n".join(
        ["import sys", "_namespace = {'__name__': '__main__'}"]
        + [f"exec(compile({body!r}, {f'{_id(path)} block {i + 1}'!r}, 'exec'), _namespace)"
           for i, body in enumerate(blocks)])
    env = dict(os.environ)
    # The compilation cache is the one the rest of the suite uses (a reader's would be warm too).
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TORCH_TPU_QUIET="1", PYTHONWARNINGS="ignore")
    for name in ("TORCH_TPU_EAGER_MODE", "TORCH_TPU_ALSO_COMPILE_FOR", "TORCH_TPU_DUMP_DIR", "TORCH_TPU_NUM_DEVICES"):
        env.pop(name, None)  # the docs describe the defaults
    result = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (f"{_id(path)}: a python block failed\n--- stdout\n{result.stdout[-3000:]}"
                                    f"\n--- stderr\n{result.stderr[-6000:]}")


def _folders_named(text):
    """The csrc/ folders a text names: every csrc/... path, cut to its folders."""
    folders = set()
    for path in re.findall(r"csrc(?:/[A-Za-z0-9_]+(?:\.[A-Za-z0-9_*]+)?)*/?", text):
        parts = [p for p in path.rstrip("/").split("/")]
        while parts and "." in parts[-1]:
            parts.pop()  # a file (or file.*): its folder is named
        if len(parts) > 1:
            folders.add("/".join(parts))
    return folders


def _csrc_folders():
    return {str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*") if p.is_dir() and "__pycache__" not in p.parts}


def test_design_names_only_folders_that_exist():
    named = _folders_named((DOCS / "design.md").read_text())
    missing = sorted(f for f in named if not (ROOT / f).is_dir() and f not in ATEN_FOLDERS)
    assert not missing, f"docs/design.md names csrc/ folders that do not exist: {missing}"


def test_design_names_every_folder():
    named = _folders_named((DOCS / "design.md").read_text())
    unnamed = sorted((_csrc_folders() | ATEN_FOLDERS) - named)
    assert not unnamed, f"docs/design.md does not describe these csrc/ folders: {unnamed}"


def test_folder_check_sees_a_rename():
    # The check reads real paths: a folder named in the text is found, a renamed one is not.
    assert "csrc/lowering" in _folders_named("see `csrc/lowering/table.cpp`")
    assert "csrc/aten/dispatch" in _folders_named("csrc/aten/dispatch/: boxed_kernel.cpp")
    assert "csrc/lowerings" not in _folders_named("see `csrc/lowering/table.cpp`")
    assert not (ROOT / "csrc/lowerings").exists()


def test_readme_is_short_and_its_guides_exist():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 150, "README.md is a short page: move details to docs/"
    assert "make demo" in text and "make test" in text
    assert re.search(r"`make test` is the test command", text)
    linked = re.findall(r"\]\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)", text)
    assert linked, "README.md links to its guides"
    missing = sorted({p for p in linked if not (ROOT / p).is_file()})
    assert not missing, f"README.md links to guides that do not exist: {missing}"


def _anchors(path):
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to -."""
    text = FENCE.sub("", path.read_text())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_links_between_docs_resolve():
    broken = []
    for path in [ROOT / "README.md", ROOT / "bench" / "README.md"] + sorted(DOCS.glob("*.md")):
        text = FENCE.sub("", path.read_text())
        for target, anchor in re.findall(r"\]\(([^)#\s:]*)(?:#([^)]*))?\)", text):
            if not target and not anchor:
                continue
            file = path.parent / target if target else path
            if not file.exists():
                broken.append(f"{_id(path)} -> {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{_id(path)} -> {target}#{anchor}")
    assert not broken, f"links to files or headings that do not exist: {broken}"


def _variables_in_code():
    names = set()
    sources = list((ROOT / "torch_tpu").rglob("*.py")) + list((ROOT / "torch_tpu_autoload").rglob("*.py"))
    sources += [p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".cpp", ".h")]
    for path in sources:
        names.update(re.findall(r"\bTORCH_TPU_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def test_env_names_every_variable_the_code_reads():
    code = _variables_in_code()
    assert "TORCH_TPU_EAGER_MODE" in code and "TORCH_TPU_DUMP_DIR" in code  # the scan sees both trees
    documented = set(re.findall(r"\bTORCH_TPU_[A-Z0-9_]*[A-Z0-9]\b", (DOCS / "env.md").read_text()))
    undocumented = sorted(code - documented)
    assert not undocumented, f"docs/env.md does not name: {undocumented}"


def test_api_names_in_docs_exist():
    # Every torch.tpu.* and torch_tpu.* name the docs mention (and tpu_target.* / kernels.*, which
    # the guides use after importing them) resolves in the installed package.
    pattern = r"(?<![\w/.-])(torch\.tpu|torch_tpu|tpu_target|kernels)((?:\.[A-Za-z_][A-Za-z0-9_]*)+)"
    names = set()
    for path in DOC_FILES + [ROOT / "bench" / "README.md"]:
        for head, tail in re.findall(pattern, path.read_text()):
            if tail in (".py", ".cpp", ".h", ".md"):
                continue  # a file name (csrc/aten/dispatch/kernels.cpp), not an attribute
            head = {"tpu_target": "torch_tpu.tpu_target", "kernels": "torch_tpu.kernels"}.get(head, head)
            names.add(head + tail)
    program = f"""
import importlib, torch, torch_tpu
missing = []
for name in {sorted(names)!r}:
    parts = name.split(".")
    obj, i = torch, 1
    if parts[0] == "torch_tpu":
        obj, i = torch_tpu, 1
    for j in range(i, len(parts)):
        try:
            obj = getattr(obj, parts[j])
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:j + 1]))
            except ImportError:
                missing.append(name)
                break
print(missing)
"""
    env = dict(os.environ, TORCH_TPU_QUIET="1")
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", f"the docs name what does not exist: {result.stdout}"


def test_docs_name_only_variables_that_exist():
    # The reverse check: a variable the docs name is read somewhere (the package, the tests, the build).
    known = _variables_in_code()
    for path in list((ROOT / "tests").rglob("*.py")) + list((ROOT / "tests").rglob("*.h")) + list((ROOT / "tests").rglob("*.cpp")) \
            + [ROOT / "Makefile", ROOT / "CMakeLists.txt"]:
        if path.name == "test_docs.py":
            continue
        known.update(re.findall(r"\bTORCH_TPU_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    named = set()
    for path in DOC_FILES + [ROOT / "bench" / "README.md"]:
        named.update(re.findall(r"\bTORCH_TPU_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    assert not sorted(named - known), f"the docs name variables nothing reads: {sorted(named - known)}"
