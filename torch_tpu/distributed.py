"""torch.distributed on tpu tensors.

Between processes, collectives on tpu tensors (all_reduce, all_gather, reduce_scatter,
broadcast, send/recv, ...) run through the process group's CPU backend on host copies
(csrc/aten/distributed/collectives.cpp), so `init_process_group("gloo")` serves tpu tensors as it serves CPU
ones: DDP, DTensor, tensor parallelism and FSDP work across processes, one tpu device each
(`torch.tpu.set_device(rank)`; `TORCH_TPU_NUM_DEVICES` gives the CPU plugin more than one
device). The backend name "tpu_dist" (what Transformers asks for on tpu) is Gloo for both cpu
and tpu tensors; those host round trips are counted in
`torch_tpu.metrics()["collectives_via_host"]`. Where the plugin's client spans the processes
(libtpu, the CUDA plugin), a "tpu_dist" group's collectives and send/recv run on the devices
instead, each rank running its part of one program, after the ranks agree on each collective
through the group's store (_register_across_processes).

Where the ranks are threads of one process, one device each (PyTorch's threaded world, as its
own DTensor tests use; `run_in_threads` here), "tpu_dist" gives an in-process group instead:
all_reduce, broadcast, all_gather, reduce_scatter, reduce, gather, scatter, all_to_all (single,
even or uneven splits, list form, functional) and barrier run on the devices as one program
replicated over the ranks' devices (csrc/aten/distributed/device_collectives.cpp), counted in
`collectives_on_device`. send/recv, isend/irecv and batch_isend_irecv run as one
collective_permute over the two ranks' devices (csrc/runtime/p2p_rendezvous.cpp); posting never
waits for the partner, `wait()` does. Ranks that issue different collectives (or a send and a
recv of different shapes or dtypes) raise on every rank involved, naming both; a rank that never
comes makes the others raise after the group's timeout. Not on the devices: recv from any source
and monitored_barrier (they raise)."""
import datetime
import os
import threading
import warnings

import torch

from . import _C

_registered = False
IN_PROCESS_BACKEND = "tpu_threads"  # device_collectives.h's kInProcessBackend


def install():
    """Registers the tpu collectives once (at import of torch_tpu when torch.distributed is built)."""
    global _registered
    if _registered or not torch.distributed.is_available():
        return
    _registered = True
    if torch.distributed.is_gloo_available() and "tpu_dist" not in torch.distributed.Backend.backend_list:
        torch.distributed.Backend.register_backend("tpu_dist", _create_tpu_dist, devices=["cpu", "tpu"],
                                                   extended_api=True)
    failed = _C._register_collectives()
    if failed:  # another torch's c10d kernel signatures
        warnings.warn("torch_tpu: these torch.distributed collectives are unavailable on tpu: " + "; ".join(failed))


def _threaded_world():
    """Whether torch.distributed's world is per thread (ranks are threads of this process)."""
    return type(torch.distributed.distributed_c10d._world).__name__ == "ThreadLocalWorld"


def _create_tpu_dist(opts, backend_options=None):
    """init_process_group("tpu_dist"): among threads of this process, an in-process group whose
    collectives run on the devices; else a Gloo backend serving both devices (the tpu
    collectives find it as the group's CPU backend), whose collectives run on the devices
    across the processes where the plugin can (_register_across_processes)."""
    if _threaded_world():
        return _create_in_process_group(opts)
    gloo = torch.distributed.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    _register_across_processes(opts)
    return gloo


CROSS_PROCESS_VARIABLE = "TORCH_TPU_CROSS_PROCESS_COLLECTIVES"


def wants_device_collectives(platform, group_size, env=None):
    """Whether this rank asks for its group's collectives on the devices across processes:
    TORCH_TPU_CROSS_PROCESS_COLLECTIVES=0 never, =1 always (a one-process group on the CPU plugin
    too), unset wherever the plugin has collectives across processes (libtpu, the CUDA plugin).
    The CPU plugin has none, so with more than one process it never does (warned when asked)."""
    env = os.environ if env is None else env
    setting = env.get(CROSS_PROCESS_VARIABLE, "")
    if setting not in ("", "0", "1"):
        raise ValueError(f"torch_tpu: {CROSS_PROCESS_VARIABLE}={setting!r}: use 0 (Gloo) or 1 (the devices)")
    if setting == "0" or (setting == "" and platform == "cpu"):
        return False
    if platform == "cpu" and group_size > 1:
        warnings.warn(f"torch_tpu: {CROSS_PROCESS_VARIABLE}=1: the cpu plugin has no collectives across processes; "
                      "this group's collectives run through Gloo")
        return False
    return True


CHECKS_VARIABLE = "TORCH_TPU_COLLECTIVE_CHECKS"


# The settings, weakest first: a group checks as its weakest rank asks (a rank that checks waits
# for the posts of one that does not).
CHECK_SETTINGS = ("off", "behind", "before")


def collective_checks(env=None):
    """TORCH_TPU_COLLECTIVE_CHECKS: how the ranks of a group across processes check that they run
    the same collectives (csrc/aten/distributed/collective_agreement.h), so that a divergence raises instead
    of hanging the devices:

    * ``behind`` (default; also ``1``): every collective is posted to the group's store and runs
      at once; the others' posts are read back behind it, several collectives per store round
      trip, and at the latest before any device value reaches the host. A divergence raises
      there, and every later host read raises it too (the devices may wait in it);
    * ``before``: every collective waits for every rank's post before it runs (a divergence
      raises before any rank runs it): two store round trips per collective;
    * ``off`` (also ``0``): only the exchanges that carry values (an uneven all_to_all's split
      sizes, a 2-D mesh program's groups), and collectives take their operands 1-D; a
      divergence hangs, as it would with NCCL."""
    env = os.environ if env is None else env
    setting = {"": "behind", "1": "behind", "0": "off"}.get(env.get(CHECKS_VARIABLE, ""), env.get(CHECKS_VARIABLE))
    if setting not in CHECK_SETTINGS:
        raise ValueError(f"torch_tpu: {CHECKS_VARIABLE}={env.get(CHECKS_VARIABLE)!r}: use behind (the default), "
                         "before or off")
    return setting


def device_collectives_verdict(ids):
    """From every rank's global device id (-1: the rank keeps Gloo), in rank order: None when the
    group's collectives can run on its devices, else why not. Every rank reads the same ids, so
    every rank reaches the same verdict (a rank on the devices with another on Gloo would hang)."""
    declined = [r for r, i in enumerate(ids) if i < 0]
    if declined:
        return f"rank(s) {', '.join(map(str, declined))} keep Gloo ({CROSS_PROCESS_VARIABLE}=0 or the cpu plugin)"
    if len(set(ids)) != len(ids):
        return (f"two ranks are on one device (global device ids {ids}): the processes' PJRT clients do not "
                "span the job (start them with torchrun, one device per process: torch.tpu.set_device(local_rank))")
    return None


def _register_across_processes(opts):
    """Where the plugin's client spans the processes (libtpu on a TPU slice under torchrun, the
    CUDA plugin), the group's collectives run on the devices: every rank's global PJRT device id
    is exchanged through the group's store, each collective compiles for the group's devices in
    rank order and each process runs its part (csrc/aten/distributed/device_collectives.h); the ranks agree
    on each collective through the store, as collective_checks() says
    (csrc/aten/distributed/collective_agreement.h). The group's
    first collective checks the whole path; if any rank fails it, every rank keeps Gloo, warned.
    Not run on a TPU or across GPUs yet: TORCH_TPU_CROSS_PROCESS_COLLECTIVES=0 keeps Gloo."""
    _C._forget_cross_process_group(opts.group_id)  # a new group may reuse a destroyed one's name
    # The platform starts the device runtime: not for a group that asked for Gloo.
    off = os.environ.get(CROSS_PROCESS_VARIABLE) == "0"
    wanted = not off and wants_device_collectives(_C._platform(), opts.group_size)
    mine = -1
    if wanted and opts.group_size > 1 and _C._global_device_count() <= torch.tpu.device_count():
        # Each process's client sees only its own devices (not started by a launcher, so the
        # plugin was not told of the others): no program can span the processes.
        warnings.warn(f"torch_tpu: group '{opts.group_id}' runs its collectives through Gloo: this process's "
                      "PJRT client does not span the job's processes (start them with torchrun)")
        wanted = False
    if wanted:
        # The process's device: LOCAL_RANK's where the process sees several (set_device may
        # follow init_process_group), else its current one (one chip per process: TPU_VISIBLE_CHIPS).
        local = int(os.environ.get("LOCAL_RANK", "-1"))
        device = local if 0 <= local < torch.tpu.device_count() and torch.tpu.device_count() > 1 else \
            torch.tpu.current_device()
        mine = int(_C._global_device_id(device))
    # Every rank posts, wanted or not, so that all reach one verdict (and check alike: a rank
    # that checks waits for the posts of one that does not).
    key = f"torch_tpu/devices/{opts.group_id}/"
    opts.store.set(key + str(opts.group_rank), f"{mine} {collective_checks()}")
    posts = [opts.store.get(key + str(r)).decode().split() for r in range(opts.group_size)]
    ids = [int(p[0]) for p in posts]
    checks = min((p[1] for p in posts), key=CHECK_SETTINGS.index)
    why_not = device_collectives_verdict(ids)
    if why_not is not None:
        if wanted:
            if os.environ.get(CROSS_PROCESS_VARIABLE) == "1" and mine >= 0 and len(set(ids)) != len(ids):
                raise RuntimeError(f"torch_tpu: group '{opts.group_id}': {why_not}")
            warnings.warn(f"torch_tpu: group '{opts.group_id}' runs its collectives through Gloo: {why_not}")
        return
    _C._register_cross_process_group(opts.group_id, ids, opts.store, opts.group_rank, opts.timeout.total_seconds(),
                                     checks, list(getattr(opts, "global_ranks_in_group", None) or []))
    failure = _C._check_cross_process_group(opts.group_id, opts.group_rank, device)
    if failure:
        _C._forget_cross_process_group(opts.group_id)
        warnings.warn(f"torch_tpu: group '{opts.group_id}': its first collective on the devices across processes "
                      f"failed ({failure}); its collectives run through Gloo. Please report this with your plugin "
                      f"({_C._platform()}); {CROSS_PROCESS_VARIABLE}=0 skips the attempt")


def _done_work(result=None):
    from torch._C._distributed_c10d import _create_work_from_future

    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


class InProcessGroup(torch.distributed.ProcessGroup):
    """A group whose ranks are threads of this process, one tpu device each. Its collectives
    are c10d's own, which reach the tpu kernels (collectives.cpp); those see the backend name
    and run on the devices. Only the barrier is its own (c10d runs one on a CPU tensor)."""

    def __init__(self, rank, size, timeout):
        super().__init__(rank, size)
        # c10d keeps a group's name in its backends: a placeholder one holds it (the tpu
        # kernels replace c10d's generic ones, so it never runs a collective; none for cpu,
        # where it would fake results).
        from torch._C._distributed_c10d import FakeProcessGroup

        self._register_backend(torch.device("tpu"), torch.distributed.ProcessGroup.BackendType.CUSTOM,
                               FakeProcessGroup._create_internal(rank, size))
        self._timeout_s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)

    def getBackendName(self):
        return IN_PROCESS_BACKEND

    def barrier(self, opts=None):
        device = torch.tpu.current_device() if opts is None or not opts.device_ids else opts.device_ids[0]
        _C._in_process_barrier(self.group_name, self.rank(), self.size(), device, self._timeout_s)
        return _done_work()

    def __repr__(self):
        return f"InProcessGroup(rank={self.rank()}, size={self.size()})"


def _create_in_process_group(opts):
    from torch.distributed.distributed_c10d import _store_based_barrier

    if opts.group_rank == 0:  # before the others pass the barrier: no collective of it has started
        _C._forget_cross_process_group(opts.group_id)  # a destroyed group of processes of this name
        _C._register_in_process_group(opts.group_id, opts.timeout.total_seconds(),
                                      list(opts.global_ranks_in_group))
    _store_based_barrier(opts.group_rank, opts.store, "", opts.group_size, opts.timeout)
    return InProcessGroup(opts.group_rank, opts.group_size, opts.timeout)


class _RankThreadsShardingPropagation:
    """DTensor's ShardingPropagator._fake_mode_lock while rank threads run. DTensor finds an op's
    output metadata by running it on fake tensors made with device=mesh.device_type ("tpu"),
    which a fake mode resolves to the calling thread's current device (tpu:rank). FakeTensorMode's
    dispatch cache is one per process and its keys hold the default device, not the current one:
    a rank thread was handed fakes cached on another rank's device and raised on tpu:0 and tpu:1
    mixed in one op. So propagations run one at a time (as PyTorch's threaded DTensor tests run
    them) with that cache off: off for the fake modes made inside (the config) and for the mode
    of a trace in progress, which DTensor reuses and which read the config when it was made
    (torch.compile's backward tracing otherwise still mixed the ranks' devices)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cache_was = None
        self._tracing_mode = None

    def __enter__(self):
        import torch._dynamo.config as dynamo_config
        from torch._guards import detect_fake_mode

        self._lock.acquire()
        self._cache_was = dynamo_config.fake_tensor_cache_enabled
        dynamo_config.fake_tensor_cache_enabled = False
        mode = detect_fake_mode()
        if mode is not None and mode.cache_enabled:
            self._tracing_mode = mode
            mode.cache_enabled = False
        return self

    def __exit__(self, *exc):
        import torch._dynamo.config as dynamo_config

        if self._tracing_mode is not None:
            self._tracing_mode.cache_enabled = True
            self._tracing_mode = None
        dynamo_config.fake_tensor_cache_enabled = self._cache_was
        self._lock.release()
        return False


def _sharding_propagator():
    try:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
    except ImportError:  # a torch without DTensor
        return None
    return ShardingPropagator if hasattr(ShardingPropagator, "_fake_mode_lock") else None


def _resolve_compile_backend():
    """Registers torch.compile's "tpu" backend now, on one thread. Dynamo loads a backend named
    by an entry point at its first lookup and registers it then; two rank threads compiling at
    once both did, and the second raised "duplicate name: tpu"."""
    try:
        from torch._dynamo.backends.registry import lookup_backend
    except ImportError:  # a torch without Dynamo
        return
    lookup_backend("tpu")


def run_in_threads(fn, world_size, *args, timeout=datetime.timedelta(seconds=60), backend="tpu_dist"):
    """Runs fn(rank, world_size, *args) on `world_size` threads, each rank of a `backend` group
    (default "tpu_dist": collectives on the devices; "gloo": through the host) on device
    tpu:rank; returns the ranks' results. The first rank's exception is raised (the others' are
    attached as its notes).

    The world is per thread: a thread that a rank starts is no rank and finds none of its groups.
    What differs from torchrun for libraries: no RANK/LOCAL_RANK/WORLD_SIZE in the environment
    (Transformers' `from_pretrained(..., tp_plan="auto")` sizes its plan from WORLD_SIZE, which
    is the same for every rank: set it, or pass tp_size), and Transformers shards weights on
    worker threads unless HF_DEACTIVATE_ASYNC_LOAD=1 (tests/test_tensor_parallel.py)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.multi_threaded_pg import (_install_threaded_pg,
                                                                      _uninstall_threaded_pg)

    if world_size > torch.tpu.device_count():
        raise ValueError(f"run_in_threads: {world_size} ranks need as many tpu devices, this process has "
                         f"{torch.tpu.device_count()} (TORCH_TPU_NUM_DEVICES sets the CPU plugin's count)")
    _resolve_compile_backend()
    _install_threaded_pg()
    propagator = _sharding_propagator()
    if propagator is not None:
        saved_lock = propagator._fake_mode_lock
        propagator._fake_mode_lock = _RankThreadsShardingPropagation()
    # Each thread registers its groups under the names the others use (functional collectives
    # find them by name): per-thread registries, as PyTorch's threaded tests set.
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    store = dist.HashStore()
    results, errors = [None] * world_size, [None] * world_size

    def rank_main(rank):
        try:
            torch.tpu.set_device(rank)
            dist.init_process_group(backend, rank=rank, world_size=world_size, store=store, timeout=timeout)
            try:
                results[rank] = fn(rank, world_size, *args)
            finally:
                dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            errors[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"tpu rank {r}") for r in range(world_size)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        _uninstall_threaded_pg()
        if propagator is not None:
            propagator._fake_mode_lock = saved_lock
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        rank, first = failed[0]
        for r, e in failed[1:]:
            first.add_note(f"rank {r} raised too: {type(e).__name__}: {e}")
        raise first
    return results
