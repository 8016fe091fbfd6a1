"""KV caches in GreenBoost buffers (greenboost.zerocopy).

A KV cache that does not fit in VRAM (ExLlamaV3-style: preallocated K and V tensors per
layer) can live in pinned system RAM (T2): the CPU writes and reads it as ordinary
numpy/torch CPU tensors, and the GPU reads and writes the very same pages over PCIe.

    from greenboost import Device, KVCache
    with Device() as gb:
        cache = KVCache(gb, layers=32, max_tokens=32768, kv_heads=8, head_dim=128)
        k, v = cache.layer(0)           # torch tensors (or numpy arrays without torch)

``TieredKVCache`` is the paged variant: its pages are separate buffers, the least
recently used ones wait in T3 and a page is moved back to T2 when it is used.
"""

import errno
import warnings
from collections import OrderedDict

from .zerocopy import _NO_T3, TIER_T2, TIER_T3, GreenBoostError, _product

# ExLlamaV3's page: the unit its block tables hand out, in tokens.
PAGE_TOKENS = 256


def _cache_dtype(dtype):
    """(dtype, bytes per element) of a cache's views: a torch dtype (float16 unless
    given) when PyTorch is installed, a numpy one otherwise."""
    try:
        import torch

        dtype = dtype or torch.float16
        return dtype, torch.empty((), dtype=dtype).element_size()
    except ImportError:
        import numpy as np

        dtype = np.dtype(dtype or "float16")
        return dtype, dtype.itemsize


def _cache_view(buffer, dtype, shape):
    """A torch tensor over ``buffer`` when PyTorch is installed, a numpy array otherwise."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return buffer.numpy(dtype, shape)
    return buffer.torch(dtype, shape)


class KVCache:
    """Per-layer K and V tensors in GreenBoost buffers, shaped like ExLlamaV3's cache
    layers: ``[2, max_tokens, kv_heads, head_dim]`` (K at index 0, V at 1). One buffer
    per layer, so layers can be freed or moved independently."""

    def __init__(self, device, layers, max_tokens, kv_heads, head_dim, dtype=None):
        self._dtype, itemsize = _cache_dtype(dtype)
        self.shape = (2, max_tokens, kv_heads, head_dim)
        self.layer_bytes = 2 * max_tokens * kv_heads * head_dim * itemsize
        self.buffers = []
        try:
            for _ in range(layers):
                self.buffers.append(device.alloc(self.layer_bytes))
        except BaseException:
            self.close()
            raise

    def layer(self, index):
        """(K, V) views of layer ``index``: torch tensors, or numpy arrays without torch."""
        kv = _cache_view(self.buffers[index], self._dtype, self.shape)
        return kv[0], kv[1]

    def close(self):
        while self.buffers:
            self.buffers.pop().close()


class TieredKVCache:
    """A paged KV cache whose hot pages are in T2, where the GPU can read them, and whose
    cold pages wait in T3, which costs no pinned RAM and may go to swap.

    The page is the unit of ExLlamaV3's and vLLM's paged caches: a sequence's block
    table lists its pages, and one page index stands for the same ``block_tokens``
    token slots in every layer. A sequence that is being decoded reads its pages in
    all layers, and one that is paused reads none, so a page goes hot or cold in every
    layer at once. Each block is therefore one buffer holding its page of every layer,
    ``[layers, 2, block_tokens, kv_heads, head_dim]`` (``kv[layer, 0]`` is K, as
    ExLlamaV3's ``k[page]``, and ``kv[layer, 1]`` is V): one move per page instead of
    one per layer.

    At most ``hot_blocks`` blocks are in T2. ``block(i)`` is a use: it promotes block
    ``i`` to T2, first demoting the least recently used hot block to T3 when the hot set
    is full (demoting first keeps T2 within ``hot_blocks``; T3 briefly holds one block
    more). The first ``hot_blocks`` blocks start in T2 and the others in T3, so T3 never
    needs room for more than ``blocks - hot_blocks + 1`` of them.

    Without T3 in the module, or without room in it (no swap, or the swap filled up), the
    cache warns once and runs in T2 only: it demotes nothing more, allocates the rest in
    T2, and blocks already in T3 are promoted when used. ``degraded`` says why, or is
    None while tiering works. A move the kernel refuses otherwise (EBUSY: someone else
    pinned the block) raises a GreenBoostError that names the block, which stays where
    it was; when that was the demote, the block asked for stays in T3 as well.
    """

    def __init__(self, device, blocks, hot_blocks, layers, kv_heads, head_dim, block_tokens=PAGE_TOKENS, dtype=None):
        if hot_blocks < 1:
            raise ValueError("hot_blocks must be at least 1: a block must be in T2 to be used")
        self.hot_blocks = hot_blocks
        self.shape = (layers, 2, block_tokens, kv_heads, head_dim)
        self._dtype, itemsize = _cache_dtype(dtype)
        self.block_bytes = _product(self.shape) * itemsize
        self.degraded = None
        self.buffers = []
        # Hot block indices, least recently used first.
        self._hot = OrderedDict()
        if not device.has_t3:
            self._degrade(_NO_T3)
        try:
            for index in range(blocks):
                self.buffers.append(self._allocate(device, cold=index >= hot_blocks))
                if self.buffers[-1].tier == TIER_T2:
                    self._hot[index] = None
        except BaseException:
            self.close()
            raise
        # One view per block, made once: block() hands out the same object every time.
        self._views = [_cache_view(buffer, self._dtype, self.shape) for buffer in self.buffers]

    def _allocate(self, device, cold):
        if cold and self.degraded is None:
            try:
                return device.alloc(self.block_bytes, t3=True)
            except GreenBoostError as error:
                if error.errno != errno.ENOMEM:
                    raise
                self._degrade(error.strerror)
        return device.alloc(self.block_bytes)

    def _degrade(self, reason):
        if self.degraded is None:
            self.degraded = reason
            warnings.warn(f"TieredKVCache keeps every block in T2 from now on: {reason}", RuntimeWarning)

    @property
    def hot(self):
        """Indices of the blocks in T2, least recently used first."""
        return list(self._hot)

    def block(self, index):
        """The view of block ``index``, promoted to T2 first (using a block is what makes
        it hot). The same view object every call, valid across the block's moves."""
        if not 0 <= index < len(self.buffers):
            raise IndexError(f"block {index} of a cache of {len(self.buffers)} blocks")
        if index in self._hot:
            self._hot.move_to_end(index)
            return self._views[index]
        if self.degraded is None and len(self._hot) >= self.hot_blocks:
            self._demote_least_recent(index)
        try:
            self.buffers[index].move(TIER_T2)
        except GreenBoostError as error:
            raise GreenBoostError(error.errno, f"block {index} cannot be promoted to T2: {error.strerror}") from None
        self._hot[index] = None
        return self._views[index]

    def _demote_least_recent(self, needed_by):
        victim = next(iter(self._hot))
        try:
            self.buffers[victim].move(TIER_T3)
        except GreenBoostError as error:
            if error.errno != errno.ENOMEM:
                raise GreenBoostError(error.errno, f"block {victim}, the least recently used, cannot be demoted "
                                                   f"to make room for block {needed_by}: {error.strerror}") from None
            self._degrade(error.strerror)
            return
        del self._hot[victim]

    def close(self):
        self._views = []
        self._hot.clear()
        while self.buffers:
            self.buffers.pop().close()
