"""Configuration, files and interrupts: environment values are parsed strictly (an error names
the variable), the disk cache refuses entries written for another key and skips what is not a
file, a broken plugin is a clear error naming its file, and a KeyboardInterrupt during an op
stays a KeyboardInterrupt and leaves the process usable. Each case runs in a fresh process."""
import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import cpu_plugin_only, run_python

pytestmark = pytest.mark.mode_independent("settings, files and interrupts: each case that runs ops sets its own mode")


def child(code, env, timeout=300):
    return run_python(textwrap.dedent(code), env=env, timeout=timeout)


MEM_CODE = """
    import torch
    try:
        print("TOTAL", torch.tpu.mem_get_info()[1])
    except Exception as e:
        print("RAISED", type(e).__name__, e)
"""


@pytest.mark.parametrize("value,total", [("100MB", 100_000_000), ("2GiB", 2 << 30), ("1e9", 1_000_000_000),
                                         ("4096", 4096), (" 1.5 KiB ", 1536), ("100mb", 100_000_000)])
def test_memory_limit_units(value, total):
    r = child(MEM_CODE, {"TORCH_TPU_MEMORY_LIMIT": value})
    assert r.returncode == 0, r.stderr
    assert f"TOTAL {total}" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("value", ["abc", "100XB", "-5", "1e400", "inf", "0x10", "10 M"])
def test_memory_limit_refuses_what_it_cannot_read(value):
    r = child(MEM_CODE, {"TORCH_TPU_MEMORY_LIMIT": value})
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout and "TORCH_TPU_MEMORY_LIMIT" in r.stdout, r.stdout + r.stderr


COUNT_CODE = """
    import torch
    print("AVAILABLE", torch.tpu.is_available())
    try:
        x = torch.ones(2, device="tpu")
        print("COUNT", torch.tpu.device_count())
    except Exception as e:
        print("RAISED", type(e).__name__, e)
"""


@pytest.mark.parametrize("value", ["0", "-1", "100000", "abc", "2.5"])
def test_num_devices_out_of_bounds_is_an_error(value):
    r = child(COUNT_CODE, {"TORCH_TPU_NUM_DEVICES": value})
    assert r.returncode == 0, r.stderr  # `import torch` itself still works
    assert "RAISED" in r.stdout and "TORCH_TPU_NUM_DEVICES" in r.stdout, r.stdout + r.stderr
    assert "AVAILABLE False" in r.stdout


@cpu_plugin_only("only the CPU plugin makes as many devices as TORCH_TPU_NUM_DEVICES asks for")
def test_num_devices_in_bounds():
    r = child(COUNT_CODE, {"TORCH_TPU_NUM_DEVICES": "3"})
    assert "COUNT 3" in r.stdout, r.stdout + r.stderr


INTEGER_SETTINGS = ["TORCH_TPU_MAX_MAPPINGS", "TORCH_TPU_MAX_PROGRAMS", "TORCH_TPU_FUSED_MAX_OPS",
                    "TORCH_TPU_FUSED_COMPILE_AFTER"]


@pytest.mark.parametrize("name", INTEGER_SETTINGS)
def test_integer_settings_refuse_text(name):
    r = child(COUNT_CODE, {name: "abc"})
    assert "RAISED" in r.stdout and name in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("name,value", [("TORCH_TPU_FUSED_MAX_OPS", "0"), ("TORCH_TPU_FUSED_MAX_OPS", "10ops"),
                                        ("TORCH_TPU_FUSED_COMPILE_AFTER", "-1"), ("TORCH_TPU_FUSED_COMPILE_AFTER", "1.5")])
def test_fused_settings_refuse_what_atoll_misread(name, value):
    r = child(COUNT_CODE, {name: value})
    assert "RAISED" in r.stdout and name in r.stdout, r.stdout + r.stderr


def test_cache_size_setting_is_checked(tmp_path):
    r = child(COUNT_CODE, {"TORCH_TPU_CACHE_MAX_BYTES": "lots", "TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert "RAISED" in r.stdout and "TORCH_TPU_CACHE_MAX_BYTES" in r.stdout, r.stdout + r.stderr


OPS_CODE = """
    import torch, torch_tpu
    torch_tpu.set_eager_mode("strict")
    x = torch.arange(6.0).to("tpu")
    for f in (torch.sin, torch.cos, torch.exp, torch.tanh, torch.sigmoid, torch.sqrt, torch.log1p, torch.neg):
        f(x).cpu()
    print("OK", torch_tpu.metrics(wait=True)["programs_compiled"])
"""


def test_cache_max_bytes_is_honoured(tmp_path):
    unlimited = tmp_path / "unlimited"
    r = child(OPS_CODE, {"TORCH_TPU_CACHE_DIR": str(unlimited)})
    assert "OK" in r.stdout, r.stderr
    sizes = sorted(os.path.getsize(f) for f in glob.glob(str(unlimited / "*" / "*.bin")))
    assert len(sizes) >= 8
    limit = sum(sizes[:3]) + 1  # room for about three entries
    limited = tmp_path / "limited"
    r = child(OPS_CODE, {"TORCH_TPU_CACHE_DIR": str(limited), "TORCH_TPU_CACHE_MAX_BYTES": str(limit)})
    assert "OK" in r.stdout, r.stderr
    kept = [os.path.getsize(f) for f in glob.glob(str(limited / "*" / "*.bin"))]
    assert 0 < sum(kept) <= limit and len(kept) < len(sizes), (kept, limit)


def run_op(op, cache, timeout=240):
    code = f"""
        import torch, torch_tpu
        torch_tpu.set_eager_mode("strict")
        x = torch.linspace(0.1, 1.0, 7, dtype=torch.float64)
        y = torch.{op}(x.to("tpu")).cpu()
        print("MATCH", torch.allclose(y, torch.{op}(x)), "COMPILED", torch_tpu.metrics(wait=True)["programs_compiled"])
    """
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache), TORCH_TPU_EAGER_MODE="strict")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_cache_entry_copied_over_another_is_refused(tmp_path):
    r = run_op("sin", tmp_path)
    assert "MATCH True" in r.stdout, r.stderr
    sin_files = set(glob.glob(str(tmp_path / "*" / "*.bin")))
    r = run_op("cos", tmp_path)
    cos_files = set(glob.glob(str(tmp_path / "*" / "*.bin"))) - sin_files
    assert len(sin_files) == 1 and len(cos_files) == 1, (sin_files, cos_files)
    (sin_file,), (cos_file,) = sin_files, cos_files
    shutil.copyfile(cos_file, sin_file)
    r = run_op("sin", tmp_path)
    assert "MATCH True COMPILED 1" in r.stdout, r.stdout + r.stderr  # refused, compiled again
    r = run_op("sin", tmp_path)
    assert "MATCH True COMPILED 0" in r.stdout, r.stdout + r.stderr  # the entry was rewritten


def test_cache_entry_that_is_a_fifo_is_skipped(tmp_path):
    r = run_op("sin", tmp_path)
    (entry,) = glob.glob(str(tmp_path / "*" / "*.bin"))
    os.remove(entry)
    os.mkfifo(entry)
    r = run_op("sin", tmp_path, timeout=240)  # would block forever opening the FIFO
    assert "MATCH True COMPILED 1" in r.stdout, r.stdout + r.stderr


def test_unusable_cache_dir_warns_once(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    r = run_op("sin", not_a_dir)
    assert "MATCH True" in r.stdout, r.stderr
    assert r.stderr.count("compilation cache") == 1 and str(not_a_dir) in r.stderr, r.stderr


PLUGIN_C = {
    "null": "const void* GetPjrtApi(void) { return 0; }",
    "zeroed": "static char table[4096]; const void* GetPjrtApi(void) { return table; }",
}


@pytest.mark.parametrize("kind", sorted(PLUGIN_C))
def test_plugin_with_a_broken_api_table_is_a_clear_error(kind, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in plugin")
    src = tmp_path / "plugin.c"
    src.write_text(PLUGIN_C[kind])
    so = tmp_path / f"fake_{kind}_plugin.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    code = """
        import torch
        print("AVAILABLE", torch.tpu.is_available())
        try:
            torch.zeros(2, device="tpu")
        except Exception as e:
            print("RAISED", type(e).__name__, e)
    """
    r = child(code, {"TORCH_TPU_PJRT_PLUGIN": str(so)})
    assert r.returncode == 0, r.stderr  # no crash
    assert "RAISED" in r.stdout and str(so) in r.stdout, r.stdout + r.stderr
    assert "AVAILABLE False" in r.stdout
    assert ("NULL" if kind == "null" else "table") in r.stdout, r.stdout


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_keyboard_interrupt_during_the_first_op_stays_one(mode):
    # Ctrl-C while the first op loads sympy (lazily, from a Python meta kernel) is simulated
    # by an import hook raising KeyboardInterrupt on the first import of sympy.
    code = """
        import sys, torch, torch_tpu
        class Interrupt:
            armed = True
            def find_spec(self, name, path=None, target=None):
                if Interrupt.armed and name.split(".")[0] == "sympy" and name.count(".") >= 1:
                    Interrupt.armed = False
                    raise KeyboardInterrupt
                return None
        sys.meta_path.insert(0, Interrupt())
        try:
            x = torch.zeros(3, 4, device="tpu").fill_(1.0)
            x = (x @ x.t()).sum(0)
            print("VALUE", x.cpu().tolist(), "armed", Interrupt.armed)
        except KeyboardInterrupt:
            print("KEYBOARD INTERRUPT")
        except BaseException as e:
            print("OTHER", type(e).__name__, e)
        y = torch.ones(3, 4, device="tpu").fill_(2.0)
        print("USABLE", (y @ y.t()).sum(0).cpu().tolist())
    """
    r = child(code, {"TORCH_TPU_EAGER_MODE": mode})
    assert r.returncode == 0, r.stderr
    assert "OTHER" not in r.stdout, r.stdout
    assert "USABLE [48.0, 48.0, 48.0]" in r.stdout, r.stdout + r.stderr
