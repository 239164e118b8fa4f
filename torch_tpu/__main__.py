"""python -m torch_tpu [info|metrics]"""
import sys

import torch

import torch_tpu


def main(argv):
    cmd = argv[0] if argv else "info"
    if cmd == "metrics":
        print(torch_tpu.metrics.report())
    elif cmd == "info":
        print(f"platform: {torch.tpu.get_device_name()}")
        print(f"devices: {torch.tpu.device_count()}")
        print(f"plugin: {torch.tpu.get_device_properties().plugin_path}")
        print(f"native ops: {len(torch_tpu.native_ops())}")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
