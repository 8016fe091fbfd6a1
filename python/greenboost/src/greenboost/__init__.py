"""GreenBoost from Python: zero-copy buffers from /dev/greenboost (pinned T2 RAM the GPU
reads in place, swappable T3 pages) as numpy arrays and PyTorch tensors, and KV caches
built on them (``KVCache``; ``TieredKVCache``, whose cold pages wait in T3).

    import greenboost
    with greenboost.Device() as gb:
        cache = greenboost.TieredKVCache(gb, blocks=256, hot_blocks=64, layers=32,
                                         kv_heads=8, head_dim=128)

``python3 -m greenboost`` is a smoke run against the device. numpy and torch are
optional: each view imports its library when asked for.
"""

from .kvcache import PAGE_TOKENS, KVCache, TieredKVCache
from .zerocopy import (ABI_VERSION, DEVICE_PATH, TIER_T2, TIER_T3, Buffer, Device,
                       GreenBoostError)

# pyproject.toml reads the version from here, so the wheel and the module agree.
__version__ = "0.1.0"

__all__ = ["ABI_VERSION", "DEVICE_PATH", "PAGE_TOKENS", "TIER_T2", "TIER_T3", "Buffer", "Device",
           "GreenBoostError", "KVCache", "TieredKVCache", "__version__"]
