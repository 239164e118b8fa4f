"""What each rank of a torchrun launch tells its plugin (torch_tpu.launch_env): pure functions,
checked without a TPU or GPU."""
import pytest

from torch_tpu.launch_env import JOB_STORE_PREFIX, apply, client_options, cuda_client_options, job_store, tpu_process_env

pytestmark = pytest.mark.mode_independent("pure functions of a launch's environment")


def torchrun(local_rank, local_size, rank, size, **extra):
    return dict(LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE=str(local_size), RANK=str(rank),
                WORLD_SIZE=str(size), **extra)


def test_one_host_of_four_chips_gives_each_rank_its_chip():
    envs = [tpu_process_env(torchrun(r, 4, r, 4)) for r in range(4)]
    for r, env in enumerate(envs):
        assert env == {
            "TPU_VISIBLE_CHIPS": str(r), "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1", "TPU_PROCESS_BOUNDS": "2,2,1",
            "TPU_PROCESS_PORT": str(8476 + r),
            "TPU_PROCESS_ADDRESSES": "localhost:8476,localhost:8477,localhost:8478,localhost:8479",
            "CLOUD_TPU_TASK_ID": str(r)}


def test_two_hosts_of_eight_chips():
    extra = dict(TPU_WORKER_HOSTNAMES="10.0.0.1,10.0.0.2", TPU_HOST_BOUNDS="1,1,2")
    env = tpu_process_env(torchrun(3, 8, 11, 16, **extra))
    assert env["TPU_VISIBLE_CHIPS"] == "3" and env["CLOUD_TPU_TASK_ID"] == "11"
    assert env["TPU_PROCESS_BOUNDS"] == "2,4,2" and env["TPU_PROCESS_PORT"] == "8479"
    addresses = env["TPU_PROCESS_ADDRESSES"].split(",")
    assert len(addresses) == 16 and addresses[0] == "10.0.0.1:8476" and addresses[-1] == "10.0.0.2:8483"
    with pytest.raises(ValueError, match="TPU_WORKER_HOSTNAMES"):
        tpu_process_env(torchrun(0, 8, 0, 16))


def test_variables_already_set_win_and_no_launcher_means_nothing():
    env = tpu_process_env(torchrun(1, 4, 1, 4, TPU_VISIBLE_CHIPS="3"))
    assert "TPU_VISIBLE_CHIPS" not in env and env["TPU_PROCESS_PORT"] == "8477"
    assert tpu_process_env({}) == {} and tpu_process_env(torchrun(0, 1, 0, 1)) == {}
    with pytest.raises(ValueError, match="inconsistent"):
        tpu_process_env(torchrun(4, 4, 4, 4))
    with pytest.raises(ValueError, match="TPU_CHIPS_PER_HOST_BOUNDS"):
        tpu_process_env(torchrun(0, 3, 0, 3))


def test_apply_only_touches_libtpu_and_cuda_options():
    env = torchrun(2, 4, 2, 4)
    apply("CPU default", env)
    assert "TPU_VISIBLE_CHIPS" not in env
    apply("libtpu", env)
    assert env["TPU_VISIBLE_CHIPS"] == "2" and env["TPU_PROCESS_BOUNDS"] == "2,2,1"
    assert cuda_client_options(torchrun(1, 2, 3, 4)) == {"node_id": 3, "num_nodes": 4, "visible_devices": [1]}
    assert cuda_client_options({}) == {}


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_only_the_cuda_plugin_gets_create_options():
    env = torchrun(1, 2, 3, 4)
    assert client_options("CUDA plugin", env) == {"node_id": 3, "num_nodes": 4, "visible_devices": [1]}
    assert client_options("libtpu", env) == {} and client_options("CPU default", env) == {}


def test_the_pjrt_key_value_callbacks_use_the_launchers_store():
    """The PJRT client's kv callbacks, called as a plugin calls them, reach the job's c10d store
    (rank 0 hosts it at MASTER_ADDR:MASTER_PORT, as init_process_group would), under the prefix."""
    import torch.distributed as dist

    from torch_tpu import _C

    port = _free_port()
    store = job_store(torchrun(0, 2, 0, 2, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
    import datetime

    other_rank = dist.PrefixStore(JOB_STORE_PREFIX, dist.TCPStore("127.0.0.1", port, 2, is_master=False,
                                                                  wait_for_workers=False,
                                                                  timeout=datetime.timedelta(seconds=20)))
    assert _C._job_store_call_as_plugin(store, "put", "node:0", "devices of rank 0") is None
    assert other_rank.get("node:0") == b"devices of rank 0"
    other_rank.set("node:1", b"\x00binary\xff")
    assert _C._job_store_call_as_plugin(store, "get", "node:1", timeout_ms=5000) == b"\x00binary\xff"
    assert _C._job_store_call_as_plugin(store, "try_get", "node:1") == b"\x00binary\xff"
    with pytest.raises(RuntimeError, match="NOT_FOUND"):
        _C._job_store_call_as_plugin(store, "try_get", "node:2")
    with pytest.raises(RuntimeError, match="DEADLINE_EXCEEDED.*node:2"):
        _C._job_store_call_as_plugin(store, "get", "node:2", timeout_ms=100)
    # A get that waits does not hold the store against a put from another thread.
    import threading

    threading.Timer(0.2, lambda: store.set("late", "v")).start()
    assert _C._job_store_call_as_plugin(store, "get", "late", timeout_ms=10000) == b"v"
    assert job_store({}) is None and job_store(torchrun(0, 2, 0, 2)) is None


def test_a_multi_process_client_is_given_the_store_before_it_starts():
    """In a fresh process under launcher variables: the store is attached before the client
    starts (the CPU plugin itself ignores it), and the device still works."""
    import os
    import subprocess
    import sys

    code = ("import torch, torch_tpu\n"
            "from torch_tpu import _C, launch_env\n"
            "assert _C._client_setup()['job_store'] is None\n"
            "launch_env.attach_job_store('CUDA plugin')\n"
            "print(_C._client_setup())\n"
            "print(torch.ones(3, device='tpu').sum().item())\n"
            "print(_C._set_job_store(launch_env.job_store()))\n")
    env = dict(os.environ, **torchrun(0, 2, 0, 2, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert "'job_store': 'torch.distributed store'" in lines[0]
    assert lines[1] == "3.0" and lines[2] == "False"  # too late once the client has started
