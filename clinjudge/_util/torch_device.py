"""Device and precision choices shared by the in-process models (the PRM and the ``hf/`` judge).

torch is handed in by the caller, so importing this module never imports it.
"""

from __future__ import annotations

from typing import Any

DTYPE_NAMES = ("bfloat16", "float16", "float32")


def resolve_device(device: str, torch: Any, error: type[Exception]) -> str:
    """``auto``: the first CUDA GPU when there is one, else the CPU.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (any torch device string).
        torch: The imported torch module.
        error: Raised when CUDA is asked for and absent.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise error(f"device {device!r} asked for, but CUDA is not available")
    return device


def resolve_dtype(dtype: str, device: str, torch: Any, error: type[Exception]) -> Any:
    """``auto``: bfloat16 on a GPU, float32 on the CPU (where bfloat16 runs slower).

    Args:
        dtype: ``auto``, ``bfloat16``, ``float16`` or ``float32``.
        device: The resolved device.
        torch: The imported torch module.
        error: Raised for an unknown name.
    """
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPE_NAMES:
        raise error(f"unknown dtype {dtype!r}; choose auto, bfloat16, float16 or float32")
    return getattr(torch, dtype)
