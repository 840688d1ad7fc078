"""What GPU a tensor lives on, in the terms the backends and the compilers use."""

import torch


def kernel_arch(device: torch.device) -> str:
    """The GPU's code-object target: "gfx950", "sm_90", ..."""
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return props.gcnArchName.split(":")[0]
    return f"sm_{props.major}{props.minor}"
