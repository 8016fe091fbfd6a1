"""The GPU suite's live-tiering checks (tests/gpu/run.sh, section "live tiering"; issue 12).

Run under the shim (run.sh: LD_PRELOAD=libgreenboost_cuda.so GREENBOOST_LOG=info, the
tiering settings at their defaults: GREENBOOST_TIERING=auto, GREENBOOST_DEMOTE=on,
GREENBOOST_TIER_INTERVAL_MS=100):

  python3 tests/gpu/tiering_check.py            (the checks, in this order, one process)

  movable                with a foreign process leaving 6 GiB free, five 2 GiB int32
                         tensors (arange + a per-tensor offset): those the device's
                         state sends to T2 are movable (greenboost_shim_t2_bytes == their
                         size; movable_allocs grows by at least as many)
  promote_while_running  the foreign process is killed; add_(1) runs over every tensor,
                         round after round, on the program's stream while the shim
                         promotes; once tier_vram covers every movable tensor (and
                         greenboost_shim_t2_bytes says 0 for each) every word must be
                         pattern + rounds; promoted bytes, promote_ns and the rate
  demote_while_running   a foreign process asks for the free VRAM plus the movable bytes
                         in VRAM minus 2 GiB (memory we hold: the driver evicts, the shim
                         demotes); the same loop runs until demoted_bytes grew and the
                         foreign process has its memory; every word again
  graph_replay           add_(1) over one movable tensor captured in a CUDA graph
                         (warmed up on a side stream), replayed while the foreign process
                         is killed (promotion) and another asks for that tensor's VRAM
                         (demotion); every word of it
  model_bit_identical    four bf16 Linear(8192, 8192) layers allocated beside a foreign
                         process leaving 1 GiB (their weights in movable T2), a fixed
                         input: y0; the foreign process killed, the weights promoted: y1;
                         torch.equal(y0, y1) (deterministic algorithms, no TF32,
                         CUBLAS_WORKSPACE_CONFIG=:4096:8; the GEMMs the shim staged for
                         each are given)

The foreign processes are this program's own roles, started without the shim (LD_PRELOAD
removed from their environment), killed when the program ends and when it dies
(PR_SET_PDEATHSIG):
  balloon LEAVE_GIB      holds all but LEAVE_GIB of the free VRAM (shared_gpu.py's
                         balloon), prints "ready MIB", holds until killed
  grab LEAVE_GIB EXTRA   asks for the free VRAM + EXTRA bytes - LEAVE_GIB (more than is
                         free: VRAM we hold) every 100 ms for up to 50 s, prints
                         "ready MIB SECONDS ATTEMPTS" once it has it (or "failed ..."),
                         holds until killed
Nothing here allocates managed memory or prefetches: only the shim moves memory. Every
wait has a timeout; a timeout prints FAIL with the shim's counters.
Output lines: PASS name: why / FAIL name: why / KV key=value; exit status 1 when anything
failed.
"""

import os

# Before torch is imported: cuBLAS reads it when its first handle is created.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import collections
import ctypes
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30
MIB = 1 << 20
TENSOR_BYTES = 2 * GIB       # each tensor of the movable checks
TENSORS = 5                  # ten GiB in all
CHUNK = 32 << 20             # words compared at once when verifying (128 MiB)
WAIT_S = 60                  # the longest any wait here may take
DEADLINE_S = 200             # no wait runs past this, from the start (run.sh's limit is 240 s)
STARTED = time.monotonic()

failures = 0


def wait_s():
    """A wait's timeout: WAIT_S, or what is left before the deadline."""
    return max(1.0, min(WAIT_S, STARTED + DEADLINE_S - time.monotonic()))


def kv(key, value):
    print(f"KV tiering.{key}={value}", flush=True)


def verdict(ok, name, why):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} tiering.{name}: {why}", flush=True)
    return ok


class ShimStats(ctypes.Structure):
    """shim/src/stats.rs ShimStats, through the tiering counters appended last."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "t1_used", "t1_peak", "t2_used", "t2_peak", "t1_allocs", "t2_allocs", "t2_after_vram_oom", "oom_returned",
        "vmm_host", "deferred_frees")] + [
        ("backend", ctypes.c_uint32), ("import_dmabuf_result", ctypes.c_int32),
        ("import_opaque_result", ctypes.c_int32), ("reserved", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64) for name in (
            "split_allocs", "gemm_staged", "gemm_staged_bytes", "headroom_spills", "gemm_prefetched",
            "movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
            "promote_ns", "demote_ns")]


TIER_FIELDS = ("movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
               "promote_ns", "demote_ns")


class Shim:
    """The shim's exports, found in the process (it is LD_PRELOADed)."""

    def __init__(self):
        lib = ctypes.CDLL(None)
        self.sized = getattr(lib, "greenboost_shim_stats_sized", None)
        self.t2 = getattr(lib, "greenboost_shim_t2_bytes", None)
        self.size = 0
        if self.sized is not None:
            self.sized.argtypes, self.sized.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_long
            self.size = self.sized(ctypes.byref(ShimStats()), ctypes.sizeof(ShimStats))
        if self.t2 is not None:
            self.t2.argtypes, self.t2.restype = [ctypes.c_ulonglong, ctypes.c_ulonglong], ctypes.c_ulonglong

    def has_tiering(self):
        return self.t2 is not None and self.size >= ctypes.sizeof(ShimStats)

    def stats(self):
        out = ShimStats()
        self.sized(ctypes.byref(out), ctypes.sizeof(out))
        return out

    def t2_bytes(self, tensor):
        return int(self.t2(tensor.data_ptr(), tensor.numel() * tensor.element_size()))

    def counters(self):
        s = self.stats()
        return " ".join(f"{name}={getattr(s, name)}" for name in ("t2_used", "headroom_spills", "split_allocs")
                        + TIER_FIELDS)


# --- foreign processes ---------------------------------------------------------------

def die_with_parent():
    """A foreign process must never outlive this program (it holds the device's VRAM)."""
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    parent = int(os.environ.get("GB_TIERING_PARENT", "0"))
    if parent and os.getppid() != parent:
        os._exit(1)


def role_balloon(leave_gib):
    die_with_parent()
    sys.path.insert(0, HERE)
    import shared_gpu

    shared_gpu.balloon(leave_gib)


def role_grab(leave_gib, extra):
    """More than is free: the free VRAM + extra - leave, retried every 100 ms."""
    die_with_parent()
    import torch

    free, _ = torch.cuda.mem_get_info()
    want = max(0, free + int(extra) - int(leave_gib * GIB))
    print(f"asking {want // MIB} free {free // MIB}", flush=True)
    started, attempts, block = time.monotonic(), 0, None
    while block is None and time.monotonic() - started < 50:
        attempts += 1
        try:
            block = torch.empty(want, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            time.sleep(0.1)
    if block is None:
        print(f"failed {want // MIB} after {attempts} attempts", flush=True)
    else:
        print(f"ready {want // MIB} {time.monotonic() - started:.3f} {attempts}", flush=True)
    while True:
        time.sleep(1)


class Foreign:
    """One of the roles above in a child without the shim; its output lines are read
    by a thread."""

    def __init__(self, *args):
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        env["GB_TIERING_PARENT"] = str(os.getpid())
        self.what = " ".join(args)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()
        LIVE.append(self)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def ready(self):
        return next((line for line in self.lines if line.startswith("ready")), None)

    def gone(self):
        return self.proc.poll() is not None or any(line.startswith("failed") for line in self.lines)

    def wait_ready(self):
        deadline = time.monotonic() + wait_s()
        while time.monotonic() < deadline and not self.ready() and not self.gone():
            time.sleep(0.05)
        return self.ready()

    def tail(self):
        return " | ".join(self.lines[-4:])[-300:]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if self in LIVE:
            LIVE.remove(self)


LIVE = []


# --- the checks --------------------------------------------------------------------

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
    need = sum(item.nbytes for item in movable)
    if not ok:
        verdict(False, "promote_while_running", f"the movable tensors ({need // MIB} MiB) were not all in VRAM "
                f"{WAIT_S} s after the foreign process was killed ({rounds} rounds of add_ ran); wrong words in "
                f"{bad or 'none'}; {shim.counters()}")
        return
    verdict(not bad and moved >= need, "promote_while_running",
            f"{len(movable)} tensors promoted in {wall:.2f} s while {rounds} rounds of add_(1) ran over all "
            f"{len(items)}: every word right ({bad or 'no tensor wrong'}); promoted {moved // MIB} MiB (want >= "
            f"{need // MIB}) in {ns / 1e6:.1f} ms of promotion batches = {rate(moved, ns)} GB/s")


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


def check_model(shim):
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    balloon = Foreign("balloon", "1")
    if not balloon.wait_ready():
        verdict(False, "model_bit_identical", f"the foreign process (leave 1 GiB) did not start: {balloon.tail()}")
        return balloon
    torch.manual_seed(1234)
    linears = [torch.nn.Linear(8192, 8192, bias=True, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    layers = []
    for linear in linears:
        layers += [linear, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).eval()
    weights = [linear.weight for linear in linears]
    wbytes = sum(w.numel() * w.element_size() for w in weights)
    in_t2 = sum(shim.t2_bytes(w) for w in weights)
    kv("model.weight_bytes", wbytes)
    kv("model.weights_in_t2", in_t2)
    x = torch.randn(64, 8192, device="cuda", dtype=torch.bfloat16, generator=torch.Generator(device="cuda").manual_seed(7))
    with torch.no_grad():
        s0 = shim.stats()
        y0 = model(x)
        torch.cuda.synchronize()
        s1 = shim.stats()
        y0_again = model(x)
        torch.cuda.synchronize()
        before = shim.stats()
        balloon.kill()
        deadline = time.monotonic() + wait_s()
        while not (shim.stats().tier_vram >= wbytes and all(shim.t2_bytes(w) == 0 for w in weights)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        up = all(shim.t2_bytes(w) == 0 for w in weights) and shim.stats().tier_vram >= wbytes
        s2 = shim.stats()
        y1 = model(x)
        torch.cuda.synchronize()
        s3 = shim.stats()
    staged0, staged1 = s1.gemm_staged - s0.gemm_staged, s3.gemm_staged - s2.gemm_staged
    kv("model.gemm_staged_t2", staged0)
    kv("model.gemm_staged_vram", staged1)
    kv("model.promoted_bytes", s2.promoted_bytes - before.promoted_bytes)
    repeat = torch.equal(y0, y0_again)
    same = torch.equal(y0, y1)
    diff = (y0.float() - y1.float()).abs().max().item()
    kv("model.repeat_same", repeat)
    kv("model.max_abs_diff", diff)
    path = f"GEMMs staged by the shim: {staged0} with the weights in T2, {staged1} in VRAM"
    if staged0 != staged1:
        path += " (different paths: staged copies against the weights in place; cuBLAS reads the same bytes either way)"
    if in_t2 != wbytes:
        verdict(False, "model_bit_identical", f"only {in_t2 // MIB} of {wbytes // MIB} MiB of weights in T2 beside a "
                f"foreign process leaving 1 GiB: the check needs them movable; {shim.counters()}")
    elif not up:
        verdict(False, "model_bit_identical", f"the weights were not all promoted {WAIT_S} s after the foreign process "
                f"was killed; {shim.counters()}")
    else:
        verdict(same and repeat, "model_bit_identical",
                f"4 bf16 Linear(8192, 8192) ({wbytes // MIB} MiB of weights) in movable T2, then promoted: outputs "
                f"{'bit-identical' if same else f'differ (max abs diff {diff})'}, repeat in T2 "
                f"{'identical' if repeat else 'differs'}; {path}")
    del model, linears, layers, weights
    return None


def checks():
    import torch

    shim = Shim()
    if not shim.has_tiering():
        verdict(False, "shim", f"no tiering counters: greenboost_shim_stats_sized answers size {shim.size} (want >= "
                f"{ctypes.sizeof(ShimStats)}), greenboost_shim_t2_bytes {'found' if shim.t2 else 'missing'}; is the "
                f"shim preloaded and built with live tiering?")
        return
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    kv("settings", " ".join(f"{name}={os.environ.get(name, '(default)')}" for name in (
        "GREENBOOST_TIERING", "GREENBOOST_DEMOTE", "GREENBOOST_TIER_INTERVAL_MS")))
    started = time.monotonic()
    items, holder = check_movable(shim)
    if items is not None and sum(1 for item in items if item.where == "t2") >= 1:
        check_promote(shim, items, holder)
        holder = check_demote(shim, items)
        holder = check_graph(shim, items, holder)
    elif items is not None:
        for name in ("promote_while_running", "demote_while_running", "graph_replay"):
            verdict(False, name, "not run: no tensor went to T2 as movable")
    if holder is not None:
        holder.kill()
    del items
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    check_model(shim)
    kv("seconds", f"{time.monotonic() - started:.1f}")


def main():
    role, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("checks", [])
    if role == "balloon":
        return role_balloon(float(args[0]))
    if role == "grab":
        return role_grab(float(args[0]), int(args[1]))
    if role != "checks":
        raise SystemExit(f"unknown role {role}")
    # run.sh's timeout sends SIGTERM: end through the finally below, which kills the
    # foreign processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        checks()
    except Exception as error:  # a crash is a failure with its reason, not a silent exit
        import traceback

        traceback.print_exc()
        verdict(False, "crash", f"{type(error).__name__}: {str(error)[:300]}")
    finally:
        for foreign in list(LIVE):
            foreign.kill()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
