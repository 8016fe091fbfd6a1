"""tests/gpu/tiering_check.py's checks over movable int32 tensors (word k holds k + a
per-tensor offset + the add_(1) rounds run over it): movable, promote_while_running,
demote_while_running and graph_replay, with their helpers (verify every word, keep
kernels running until a condition holds)."""

import collections
import time

from tiering_common import GIB, MIB, WAIT_S, kv, verdict, wait_s
from tiering_foreign import Foreign

TENSOR_BYTES = 2 * GIB       # each tensor of the movable checks
TENSORS = 5                  # ten GiB in all
CHUNK = 32 << 20             # words compared at once when verifying (128 MiB)


class Item:
    """A tensor of the checks: word k holds k + offset + added."""

    def __init__(self, index, tensor, offset, where):
        self.index, self.t, self.offset, self.added, self.where = index, tensor, offset, 0, where

    @property
    def nbytes(self):
        return self.t.numel() * self.t.element_size()


def verify(items):
    """Indices of the tensors with a wrong word (and where the first wrong chunk starts)."""
    import torch

    torch.cuda.synchronize()
    bad = []
    for item in items:
        n = item.t.numel()
        for start in range(0, n, CHUNK):
            end = min(n, start + CHUNK)
            expected = torch.arange(start, end, dtype=torch.int32, device="cuda").add_(item.offset + item.added)
            if not torch.equal(item.t[start:end], expected):
                bad.append(f"{item.index}@{start}")
                break
            del expected
    return bad


def keep_running(launch, done, timeout_s):
    """Calls launch() (a round of kernels on the current stream) until done() says so,
    at most two rounds queued ahead of the GPU. Returns (rounds, done in time)."""
    import torch

    events = collections.deque()
    rounds, deadline = 0, time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return rounds, False
        launch()
        rounds += 1
        event = torch.cuda.Event()
        event.record()
        events.append(event)
        if len(events) > 2:
            events.popleft().synchronize()
    return rounds, True


def add_round(items):
    def launch():
        for item in items:
            item.t.add_(1)
            item.added += 1
    return launch


def promoted(shim, items):
    need = sum(item.nbytes for item in items)
    return shim.stats().tier_vram >= need and all(shim.t2_bytes(item.t) == 0 for item in items)


def rate(nbytes, ns):
    return f"{nbytes / ns:.2f}" if ns else "none"


def check_movable(shim):
    import torch

    balloon = Foreign("balloon", "6")
    if not balloon.wait_ready():
        verdict(False, "movable", f"the foreign process (leave 6 GiB) did not start: {balloon.tail()}")
        return None, balloon
    kv("movable.balloon", balloon.ready())
    before = shim.stats()
    items = []
    for index in range(TENSORS):
        t = torch.empty(TENSOR_BYTES // 4, dtype=torch.int32, device="cuda")
        offset = index * 1_000_003
        torch.arange(0, t.numel(), dtype=torch.int32, out=t).add_(offset)  # in place: no temporary
        t2 = shim.t2_bytes(t)
        where = "t2" if t2 == t.numel() * 4 else "vram" if t2 == 0 else "split"
        items.append(Item(index, t, offset, where))
    torch.cuda.synchronize()
    after = shim.stats()
    movable = [item for item in items if item.where == "t2"]
    grew = after.movable_allocs - before.movable_allocs
    kv("movable.placement", ",".join(item.where for item in items))
    kv("movable.tensors", len(movable))
    kv("movable.movable_allocs_grew", grew)
    kv("movable.headroom_spills_grew", after.headroom_spills - before.headroom_spills)
    bad = verify(items)
    still = [item.index for item in movable if shim.t2_bytes(item.t) != item.nbytes]
    verdict(len(movable) >= 2 and grew >= len(movable) and not bad,
            "movable", f"{len(movable)} of {TENSORS} tensors of 2 GiB wholly in T2 (want >= 2), movable_allocs "
            f"+{grew} (want >= {len(movable)}), placement {[item.where for item in items]}, wrong words in "
            f"{bad or 'none'}, moved before the foreign process left: {still or 'none'}; {shim.counters()}")
    return items, balloon


def check_promote(shim, items, balloon):
    movable = [item for item in items if item.where == "t2"]
    # Bytes still in T2 when the foreign process goes: the tier thread may have promoted
    # some before it (free VRAM beyond the headroom while it held the rest).
    need = sum(shim.t2_bytes(item.t) for item in movable)
    before = shim.stats()
    killed = time.monotonic()
    balloon.kill()
    rounds, ok = keep_running(add_round(items), lambda: promoted(shim, movable), wait_s())
    wall = time.monotonic() - killed
    if ok:
        for _ in range(10):  # a few rounds over the promoted memory as well
            add_round(items)()
        rounds += 10
    after = shim.stats()
    bad = verify(items)
    moved, ns = after.promoted_bytes - before.promoted_bytes, after.promote_ns - before.promote_ns
    kv("promote.rounds", rounds)
    kv("promote.wall_s", f"{wall:.2f}")
    kv("promote.promoted_bytes", moved)
    kv("promote.promote_ns", ns)
    kv("promote.GBps", rate(moved, ns))
    kv("promote.promotions", after.promotions - before.promotions)
    if not ok:
        verdict(False, "promote_while_running", f"the movable tensors ({need // MIB} MiB in T2 at the kill) were not all in VRAM "
                f"{WAIT_S} s after the foreign process was killed ({rounds} rounds of add_ ran); wrong words in "
                f"{bad or 'none'}; {shim.counters()}")
        return
    verdict(not bad and need > 0 and moved >= need, "promote_while_running",
            f"{len(movable)} tensors in VRAM {wall:.2f} s after the kill while {rounds} rounds of add_(1) ran over all "
            f"{len(items)}: every word right ({bad or 'no tensor wrong'}); promoted {moved // MIB} MiB (want >= "
            f"{need // MIB}, what was still in T2 at the kill) in {ns / 1e6:.1f} ms of promotion batches = {rate(moved, ns)} GB/s")


def check_demote(shim, items):
    movable = [item for item in items if item.where == "t2"]
    before = shim.stats()
    grab = Foreign("grab", "2", str(before.tier_vram))
    started = time.monotonic()

    def demoted():
        return grab.gone() or (shim.stats().demoted_bytes > before.demoted_bytes and grab.ready())

    rounds, ok = keep_running(add_round(items), demoted, wait_s())
    wall = time.monotonic() - started
    ok = ok and not grab.gone()
    after = shim.stats()
    bad = verify(items)
    moved, ns = after.demoted_bytes - before.demoted_bytes, after.demote_ns - before.demote_ns
    kv("demote.foreign", grab.ready() or grab.tail())
    kv("demote.rounds", rounds)
    kv("demote.wall_s", f"{wall:.2f}")
    kv("demote.demoted_bytes", moved)
    kv("demote.demote_ns", ns)
    kv("demote.GBps", rate(moved, ns))
    kv("demote.demotions", after.demotions - before.demotions)
    kv("demote.tier_vram_after", after.tier_vram)
    kv("demote.movable_in_t2_after", sum(1 for item in movable if shim.t2_bytes(item.t) == item.nbytes))
    if not ok:
        verdict(False, "demote_while_running", f"within {WAIT_S} s: demoted_bytes +{moved}, the foreign process "
                f"({grab.what}): {grab.tail() or 'no output'}; {rounds} rounds of add_ ran; wrong words in "
                f"{bad or 'none'}; {shim.counters()}")
        return grab
    verdict(not bad, "demote_while_running",
            f"the foreign process got VRAM we held ({grab.ready()}) and the shim demoted {moved // MIB} MiB in "
            f"{ns / 1e6:.1f} ms of demotion batches ({rate(moved, ns)} GB/s) while {rounds} rounds of add_(1) ran: "
            f"every word right ({bad or 'no tensor wrong'})")
    return grab


def check_graph(shim, items, grab):
    """One movable tensor (the others freed), add_(1) captured in a CUDA graph and
    replayed across a promotion and a demotion."""
    import torch

    movable = [item for item in items if item.where == "t2"]
    item = movable[0]
    for other in movable[1:]:
        items.remove(other)
    other = movable = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    kv("graph.t2_bytes_at_capture", shim.t2_bytes(item.t))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            item.t.add_(1)
            item.added += 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            item.t.add_(1)
    except RuntimeError as error:
        verdict(False, "graph_replay", f"capture failed (default capture_error_mode 'global': a CUDA call of the "
                f"shim's tiering thread during the capture invalidates it): {str(error)[:300]}")
        return grab
    torch.cuda.synchronize()

    def replay():
        graph.replay()
        item.added += 1

    before = shim.stats()
    grab.kill()
    replays, up = keep_running(replay, lambda: promoted(shim, [item]), wait_s())
    middle = shim.stats()
    kv("graph.promote_replays", replays)
    kv("graph.promoted_bytes", middle.promoted_bytes - before.promoted_bytes)
    down, grab = False, None
    if up:
        grab = Foreign("grab", "1", str(middle.tier_vram))

        def demoted():
            return grab.gone() or (shim.stats().demoted_bytes > middle.demoted_bytes and grab.ready())

        more, down = keep_running(replay, demoted, wait_s())
        down = down and not grab.gone()
        replays += more
        kv("graph.demote_replays", more)
        kv("graph.foreign", grab.ready() or grab.tail())
    for _ in range(20):
        replay()
    replays += 20
    after = shim.stats()
    kv("graph.demoted_bytes", after.demoted_bytes - middle.demoted_bytes)
    kv("graph.t2_bytes_after", shim.t2_bytes(item.t))
    bad = verify(items)
    graph = None  # replay() holds it: released here, before the model check
    if not up or not down:
        verdict(False, "graph_replay", f"{'promotion' if not up else 'demotion'} not seen within {WAIT_S} s "
                f"({replays} replays){'; foreign: ' + grab.tail() if grab else ''}; wrong words in "
                f"{bad or 'none'}; {shim.counters()}")
    else:
        verdict(not bad, "graph_replay", f"{replays} replays of a captured add_(1) across a promotion and a "
                f"demotion of its 2 GiB tensor: every word right ({bad or 'no tensor wrong'})")
    return grab

