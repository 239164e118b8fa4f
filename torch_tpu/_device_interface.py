"""The Dynamo DeviceInterface for "tpu": what Dynamo needs to trace device calls (torch.tpu,
one stream per device) and what Inductor asks of a device.

Imported by torch_tpu._dynamo_hooks as soon as Dynamo's device_interface module is, so the
table never holds Dynamo's built-in "tpu" entry (which belongs to another project)."""
import torch
from torch._dynamo import device_interface as _device_interface


class TpuInterface(_device_interface.DeviceInterface):
    """What Dynamo needs to trace device calls on "tpu" (torch.tpu, one stream per device)."""

    device = torch.tpu.device
    Event = torch.tpu.Event
    Stream = torch.tpu.Stream

    class Worker:
        @staticmethod
        def set_device(device):
            torch.tpu.set_device(device)

        @staticmethod
        def current_device():
            return torch.tpu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return torch.tpu.get_device_properties(device)

    current_device = staticmethod(torch.tpu.current_device)
    set_device = staticmethod(torch.tpu.set_device)
    device_count = staticmethod(torch.tpu.device_count)
    is_available = staticmethod(torch.tpu.is_available)
    synchronize = staticmethod(torch.tpu.synchronize)
    current_stream = staticmethod(torch.tpu.current_stream)
    set_stream = staticmethod(torch.tpu.set_stream)
    stream = staticmethod(torch.tpu.stream)
    get_device_properties = staticmethod(torch.tpu.get_device_properties)
    memory_allocated = staticmethod(torch.tpu.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device):
        return TpuInterface.exchange_device(device)

    @staticmethod
    def exchange_device(device):
        previous = torch.tpu.current_device()
        if device >= 0 and device != previous:
            torch.tpu.set_device(device)
        return previous

    @staticmethod
    def _set_stream_by_id(stream_id, device_index, device_type):
        torch.tpu.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx):
        return 0

    @staticmethod
    def get_compute_capability(device=None):
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation=False):
        return True

    @classmethod
    def is_dtype_supported(cls, dtype, including_emulation=False):
        return dtype not in (torch.complex32,)

    @staticmethod
    def is_triton_capable(device=None):
        return False


def register():
    # Dynamo fills its table with built-in interfaces on first use ("tpu" among them): fill it
    # first so that ours stays.
    _device_interface.get_registered_device_interfaces()
    _device_interface.register_interface_for_device("tpu", TpuInterface)
    for index in range(torch.tpu.device_count()):
        _device_interface.register_interface_for_device(f"tpu:{index}", TpuInterface)
