"""What each rank of a torchrun launch tells its plugin (torch_tpu.launch_env): pure functions,
checked without a TPU or GPU."""
import pytest

from torch_tpu.launch_env import apply, cuda_client_options, tpu_process_env


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
