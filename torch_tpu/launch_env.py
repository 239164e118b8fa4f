"""One process per chip under torchrun: what each rank tells its PJRT plugin before the client
starts. Pure functions of the launcher's environment (LOCAL_RANK, LOCAL_WORLD_SIZE, RANK,
WORLD_SIZE), so every rank's result is unit-tested without a TPU or GPU.

libtpu (torch_xla's convention, torch_xla/_internal/tpu.py): each process sees one chip
(TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1), the processes tile the slice
(TPU_PROCESS_BOUNDS = host bounds x chips-per-host bounds), and find each other at
TPU_PROCESS_ADDRESSES (host:port per process, ports from 8476 on each host), this one at
TPU_PROCESS_PORT, its index CLOUD_TPU_TASK_ID. One process per host keeps all its chips. On one host nothing needs giving; across hosts
TPU_WORKER_HOSTNAMES (the hosts, in worker order) and TPU_HOST_BOUNDS (their arrangement, e.g.
"1,1,2") are read. Variables already set win.

The CUDA plugin (jax's PJRT_Client_Create options): node_id, num_nodes, visible_devices.

Both multi-process clients exchange their devices through a key-value store given to
PJRT_Client_Create, so that every process sees the job's global device ids. That store is
torch.distributed's (`job_store`): the default process group's when one exists before the
first tpu tensor, else the launcher's TCPStore at MASTER_ADDR:MASTER_PORT (torchrun's agent
store, or rank 0's multi-tenant one, which init_process_group later shares), under the prefix
"torch_tpu/pjrt/". The CPU plugin gets neither: it has no collectives across processes.
"""
import os

BASE_PORT = 8476
# Chips of one TPU host as a 3-D box, by chips per host (v4/v5p hosts: 4 chips 2x2x1; v5e/v6e: 4
# (2x2) or 8 (2x4)).
CHIPS_PER_HOST_BOUNDS = {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 4, 1)}


def launcher(env=None):
    """(local_rank, local_world_size, rank, world_size) from torchrun's variables; None when
    the process was not started by a launcher (or is alone)."""
    env = os.environ if env is None else env
    try:
        local_rank, local_size = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
        rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    if size <= 1:
        return None
    if not (0 <= local_rank < local_size <= size and 0 <= rank < size) or size % local_size:
        raise ValueError(f"torch_tpu: inconsistent launcher variables LOCAL_RANK={local_rank} "
                         f"LOCAL_WORLD_SIZE={local_size} RANK={rank} WORLD_SIZE={size}")
    return local_rank, local_size, rank, size


def _bounds(text, name):
    dims = tuple(int(d) for d in text.split(","))
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"torch_tpu: {name}={text!r} is not three positive integers 'x,y,z'")
    return dims


def tpu_process_env(env=None):
    """The libtpu variables this rank needs (only those not already set); {} outside a launcher."""
    env = os.environ if env is None else env
    ranks = launcher(env)
    if ranks is None:
        return {}
    local_rank, local_size, rank, size = ranks
    if local_size == 1:  # one process per host keeps all of its host's chips
        return {}
    hosts = size // local_size
    if "TPU_CHIPS_PER_HOST_BOUNDS" in env:
        per_host = _bounds(env["TPU_CHIPS_PER_HOST_BOUNDS"], "TPU_CHIPS_PER_HOST_BOUNDS")
    elif local_size in CHIPS_PER_HOST_BOUNDS:
        per_host = CHIPS_PER_HOST_BOUNDS[local_size]
    else:
        raise ValueError(f"torch_tpu: {local_size} processes per host: set TPU_CHIPS_PER_HOST_BOUNDS (e.g. '2,2,1')")
    if per_host[0] * per_host[1] * per_host[2] != local_size:
        raise ValueError(f"torch_tpu: {local_size} processes per host, one chip each, but the host's chips are "
                         f"{per_host} (TPU_CHIPS_PER_HOST_BOUNDS)")
    if hosts == 1:
        host_bounds, names = (1, 1, 1), ["localhost"]
    else:
        names = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
        if len(names) != hosts or "TPU_HOST_BOUNDS" not in env:
            raise ValueError(f"torch_tpu: {hosts} TPU hosts: set TPU_WORKER_HOSTNAMES (the {hosts} hosts, comma-"
                             "separated, in worker order) and TPU_HOST_BOUNDS (their arrangement, e.g. '1,1,2')")
        host_bounds = _bounds(env["TPU_HOST_BOUNDS"], "TPU_HOST_BOUNDS")
        if host_bounds[0] * host_bounds[1] * host_bounds[2] != hosts:
            raise ValueError(f"torch_tpu: TPU_HOST_BOUNDS={env['TPU_HOST_BOUNDS']} does not hold {hosts} hosts")
    ports = [BASE_PORT + i for i in range(local_size)]
    wanted = {
        "TPU_VISIBLE_CHIPS": str(local_rank),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": ",".join(str(h * c) for h, c in zip(host_bounds, per_host)),
        "TPU_PROCESS_PORT": str(ports[local_rank]),
        "TPU_PROCESS_ADDRESSES": ",".join(f"{h}:{p}" for h in names for p in ports),
        "CLOUD_TPU_TASK_ID": str(rank),
    }
    return {k: v for k, v in wanted.items() if k not in env}


def cuda_client_options(env=None):
    """PJRT_Client_Create options for the CUDA plugin under a launcher ({} outside one): this
    process is node `rank` of `world_size`, on its local GPU."""
    ranks = launcher(env)
    if ranks is None:
        return {}
    local_rank, _, rank, size = ranks
    return {"node_id": rank, "num_nodes": size, "visible_devices": [local_rank]}


def client_options(plugin_how, env=None):
    """PJRT_Client_Create options for the chosen plugin ({} but for the CUDA plugin under a
    launcher; libtpu reads its environment instead)."""
    return cuda_client_options(env) if plugin_how == "CUDA plugin" else {}


JOB_STORE_PREFIX = "torch_tpu/pjrt"  # PrefixStore adds the "/"


def job_store(env=None, timeout=None):
    """The store the PJRT client shares with the job's other processes, or None outside a
    launcher (or where no store can be reached: no process group and no MASTER_ADDR/PORT)."""
    import datetime

    import torch.distributed as dist

    env = os.environ if env is None else env
    ranks = launcher(env)
    if ranks is None or not dist.is_available():
        return None
    _, _, rank, size = ranks
    if dist.is_initialized():
        store = dist.distributed_c10d._get_default_store()
    elif "MASTER_ADDR" in env and "MASTER_PORT" in env:
        # Not waiting for the other workers: they connect when their own client starts.
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), size, is_master=(rank == 0 and not agent),
                              timeout=timeout or datetime.timedelta(minutes=30), wait_for_workers=False,
                              multi_tenant=True)
    else:
        return None
    return dist.PrefixStore(JOB_STORE_PREFIX, store)


def attach_job_store(plugin_how, env=None):
    """Gives the job's store to a multi-process client before it starts (a warning where a
    launcher runs several processes but no store is reachable: each then sees only its own
    devices)."""
    if plugin_how == "CPU default" or launcher(env) is None:
        return None
    from . import _C

    store = job_store(env)
    if store is None:
        import warnings

        warnings.warn("torch_tpu: several processes under a launcher, but no torch.distributed store to share "
                      "with the PJRT client (no process group yet and no MASTER_ADDR/MASTER_PORT): each process "
                      "sees only its own devices. Call torch.distributed.init_process_group before the first tpu "
                      "tensor.")
        return None
    _C._set_job_store(store)
    return store


def apply(plugin_how, env=None):
    """Sets libtpu's per-process variables before its client starts (nothing for other plugins:
    the CUDA plugin takes cuda_client_options at client creation)."""
    env = os.environ if env is None else env
    if plugin_how == "libtpu":
        env.update(tpu_process_env(env))
