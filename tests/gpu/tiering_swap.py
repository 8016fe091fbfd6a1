"""The GPU suite's checks of swapped roles (tests/gpu/run.sh, section "swap"; issues 34 and
36): on a contested device (another process holds more than twice the 1 GiB headroom)
what the shim places in VRAM is movable (CUDA managed memory), live tiering swaps hot T2
allocations with the coldest in VRAM, and an allocation made while the program computes
that finds no room sends weights to T2 at once (make_room). These checks run real
frameworks on that memory.

Run under the shim (run.sh: LD_PRELOAD=libgreenboost_cuda.so GREENBOOST_LOG=info, tiering at
its defaults):

  python3 tests/gpu/tiering_swap.py

This process starts the foreign process itself (the balloon: all but LEAVE_GIB of the
free VRAM held, without the shim, restarted if it dies) and runs each check's programs in
processes of their own under the shim (the roles below, this file's first argument), each
with a timeout, killed with their children when they run out or when this program ends;
the roles die with it (PR_SET_PDEATHSIG). Their stderr (the shim's log and exit summary)
is copied to this program's stderr.

  swap.training             role train, twice: at the defaults and with
                            GREENBOOST_TIERING=off, beside the balloon; 6 AdamW steps of a
                            bf16 Linear + 8 frozen tanh(Linear) layers (5 GiB loaded first,
                            then more activations than the room left); losses bit-identical
                            (float.hex), and the default run swapped (swaps > 0)
  swap.dlpack.*             role dlpack (tiering_swap_dlpack.py): a weight the shim moved to
                            T2 and an activation in movable VRAM through CuPy, JAX and Triton
  swap.pointer_attributes   role attributes: cudaPointerGetAttributes on movable VRAM: device
                            and devicePointer right; swap.pointer_attributes_type: type 2
                            (device) as for cudaMalloc memory (issue 36; managed is 3)
  swap.ipc_refused_explained, swap.ipc_tiering_off
                            role ipc, twice: a CUDA tensor passed to a spawned child
                            (torch.multiprocessing); at the defaults the share raises and the
                            shim's stderr says "CUDA IPC cannot export"; with
                            GREENBOOST_TIERING=off the child reads its sum
  swap.make_room            role make_room: 1 GiB weights fill the room, a product, then 1
                            GiB activations are in VRAM as soon as allocated, with swaps;
                            swap.make_room.weights_intact: the weights' checksums

Output: PASS name: why / FAIL name: why / KV key=value; exit status 1 when anything failed.
Roles and their helpers: tiering_swap_roles.py, tiering_swap_dlpack.py,
tiering_swap_triton.py; the shim's counters are gbgpu.shim_exports'.
"""

import os

# Before torch is imported in a role (they inherit it): cuBLAS reads it at its first handle.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from gbgpu.foreign import balloon, child_env, die_with_parent, kill_group
from gbgpu.verdicts import COUNTS, kv, record

ENTRY = os.path.abspath(__file__)  # the program whose roles run_role starts
PREFIX = "swap"                    # of the figures the harness prints
LEAVE_GIB = 8           # what the balloon leaves free: the room the checks fill
ROLE_TIMEOUT_S = 150    # one role process
DEADLINE_S = 420        # no role runs past this, from the start (run.sh gives the section 480 s)
STARTED = time.monotonic()
RUNNING = []            # role processes started and not yet ended
WORK = None             # the roles' output files: a folder made by main, removed at its end


def seconds_left(most):
    return max(1.0, min(most, STARTED + DEADLINE_S - time.monotonic()))


def tail(text, n=600):
    return " | ".join(line for line in text.strip().splitlines()[-8:])[-n:]


def say(name, ok, detail):
    """A PASS/FAIL line, on one line whatever the detail holds (run.sh reads lines)."""
    record(name, ok, " | ".join(part.strip() for part in str(detail).splitlines() if part.strip()))


class Run:
    """A role's run: its exit, output and stderr, and the lines it printed."""

    def __init__(self, role, label, rc, out, err, seconds, timed_out):
        self.role, self.label, self.rc, self.out, self.err = role, label, rc, out, err
        self.seconds, self.timed_out = seconds, timed_out
        self.data = None
        for line in out.splitlines():
            if line.startswith("DATA "):
                try:
                    self.data = json.loads(line[5:])
                except ValueError:
                    pass

    def why(self):
        how = f"timed out after {self.seconds:.0f} s" if self.timed_out else f"exited with status {self.rc}"
        return f"role {self.label} {how}; stderr: {tail(self.err) or '(none)'}"


def run_role(role, *args, env=None, timeout=ROLE_TIMEOUT_S, label=None):
    """Runs `tiering_swap.py ROLE ARGS` under the shim (this process's environment, with
    `env` on top), in a process group of its own; its stderr is copied to ours."""
    label = label or " ".join((role,) + args)
    role_env = dict(os.environ, GB_TIERING_PARENT=str(os.getpid()))
    role_env.update(env or {})
    name = label.replace(" ", "_")
    out_path, err_path = os.path.join(WORK, f"{name}.out"), os.path.join(WORK, f"{name}.err")
    began = time.monotonic()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, ENTRY, role, *args], stdout=out, stderr=err, env=role_env,
                                start_new_session=True)
    RUNNING.append(proc)
    timed_out = False
    try:
        rc = proc.wait(timeout=seconds_left(timeout))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        rc = proc.wait()
    finally:
        kill_group(proc)  # a child it spawned and left behind
        RUNNING.remove(proc)
    with open(out_path) as out, open(err_path, errors="replace") as err:
        run = Run(role, label, rc, out.read(), err.read(), time.monotonic() - began, timed_out)
    sys.stderr.write(f"--- {os.path.basename(ENTRY)} {label}: stderr ---\n{run.err}")
    sys.stderr.flush()
    kv(f"{PREFIX}.role.{name}.seconds", f"{run.seconds:.1f}")
    return run


def relay(run, expected=()):
    """Prints the run's KV lines, and its VERDICT lines as PASS/FAIL; a name in
    `expected` it did not give is a failure with the run's end as the reason."""
    seen = set()
    for line in run.out.splitlines():
        if line.startswith("KV "):
            print(line, flush=True)
        elif line.startswith("VERDICT "):
            try:
                v = json.loads(line[8:])
            except ValueError:
                continue
            say(v["name"], v["ok"], v["detail"])
            seen.add(v["name"])
    for name in expected:
        if name not in seen:
            say(name, False, f"not reported: {run.why()}")


class Balloon:
    """The foreign process: this file's balloon role without the shim, started on first
    need and again when it is gone."""

    def __init__(self, leave_gib):
        self.leave, self.proc, self.ready = leave_gib, None, None
        self.path = os.path.join(WORK, "balloon.out")

    def output(self):
        with open(self.path, errors="replace") as out:
            return out.read()

    def ensure(self):
        """None when it holds the VRAM, else why not."""
        if self.proc is not None and self.proc.poll() is None and self.ready:
            return None
        self.kill()
        with open(self.path, "w") as out:
            self.proc = subprocess.Popen([sys.executable, ENTRY, "balloon", str(self.leave)], stdout=out,
                                         stderr=subprocess.STDOUT, env=child_env(), start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ready = next((line for line in self.output().splitlines() if line.startswith("ready")), None)
            if ready:
                self.ready = ready
                kv(f"{PREFIX}.balloon", f"{ready} MiB held, leave {self.leave} GiB")
                return None
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        why = f"the balloon (leave {self.leave} GiB, without the shim) did not start: {tail(self.output(), 300)}"
        self.kill()
        return why

    def kill(self):
        if self.proc is not None:
            kill_group(self.proc)
            self.proc.wait()
        self.proc, self.ready = None, None


def fail_all(names, why):
    for name in names:
        say(name, False, why)


# --- the checks: each given the balloon, each a list of verdict names -------------------------
def check_pointer_attributes(foreign):
    relay(run_role("attributes", timeout=90), ("swap.pointer_attributes", "swap.pointer_attributes_type"))


def check_make_room(foreign):
    relay(run_role("make_room", timeout=120), ("swap.make_room", "swap.make_room.weights_intact"))


def check_dlpack(foreign):
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
    relay(run_role("dlpack", env=env, timeout=180),
          ("swap.dlpack.moved", "swap.dlpack.cupy", "swap.dlpack.triton", "swap.dlpack.jax"))


def check_training(foreign):
    runs = {}
    for mode, env in (("auto", {}), ("off", {"GREENBOOST_TIERING": "off"})):
        runs[mode] = run_role("train", mode, env=env, timeout=150)
        relay(runs[mode])
        if mode == "auto" and runs[mode].data is None:
            break  # nothing to compare with
    auto, off = runs["auto"], runs.get("off")
    if auto.data is None or off is None or off.data is None:
        missing = auto if auto.data is None else off
        say("swap.training", False, f"no losses from the run at {missing.label}: {missing.why()}")
        return
    a, b = auto.data["losses"], off.data["losses"]
    swaps, grew = auto.data["grown"]["swaps"], auto.data["grown"]
    differ = [step for step, (x, y) in enumerate(zip(a, b)) if x != y]
    moved = (f"at the defaults: swaps +{swaps}, demotions +{grew['demotions']}, promotions +{grew['promotions']}, "
             f"{auto.data['movable_allocs']} movable allocations, {auto.data['seconds']:.1f} s; with "
             f"GREENBOOST_TIERING=off swaps +{off.data['grown']['swaps']}, {off.data['seconds']:.1f} s")
    if not a or len(a) != len(b) or differ:
        first = differ[0] if differ else None
        say("swap.training", False, f"losses differ: {len(a)} and {len(b)} steps"
               + (f", first at step {first}: {a[first]} (defaults) against {b[first]} (off)" if first is not None else "")
               + f"; {moved}")
    elif swaps == 0:
        say("swap.training", False, f"no swap happened: the check tests nothing (losses bit-identical over "
               f"{len(a)} steps all the same); {moved}")
    else:
        say("swap.training", True, f"{len(a)} steps' losses bit-identical (float.hex) at the defaults and with "
               f"GREENBOOST_TIERING=off beside the balloon; {moved}")


IPC_WARNING = "CUDA IPC cannot export"


def check_ipc(foreign):
    auto = run_role("ipc", "auto", timeout=150)
    relay(auto)
    said = IPC_WARNING in auto.err
    kv("swap.ipc.auto.warned", said)
    if auto.data is None:
        say("swap.ipc_refused_explained", False, f"no answer: {auto.why()}")
    else:
        d = auto.data
        kv("swap.ipc.auto.raised", d["raised"])
        what = f"the tensor is {'managed (movable VRAM)' if d['is_managed'] == 1 else 'NOT managed memory'}"
        if d["raised"]:
            say("swap.ipc_refused_explained", said, f"sharing raised ({d['error']}); the shim's stderr "
                   f"{'says' if said else 'does NOT say'} '{IPC_WARNING}'; {what}")
        else:
            say("swap.ipc_refused_explained", False, f"sharing did not raise at the defaults on the contested "
                   f"device (child: {d.get('answer')}); {what}: the check wants movable VRAM, which IPC refuses")
    off = run_role("ipc", "off", env={"GREENBOOST_TIERING": "off"}, timeout=150)
    relay(off)
    if off.data is None:
        say("swap.ipc_tiering_off", False, f"no answer: {off.why()}")
        return
    d = off.data
    answer = d.get("answer")
    right = not d["raised"] and answer is not None and answer[0] == "ok" and answer[1] == d["expected"]
    say("swap.ipc_tiering_off", right,
           "with GREENBOOST_TIERING=off: " + (f"sharing raised: {d['error']}" if d["raised"] else
                                               f"the child read sum {answer} (want {d['expected']}), exit "
                                               f"{d.get('child_exit')}") +
           f"; the tensor is {'managed' if d['is_managed'] == 1 else 'plain device memory'}")


CHECKS = [
    (check_pointer_attributes, ("swap.pointer_attributes", "swap.pointer_attributes_type")),
    (check_make_room, ("swap.make_room", "swap.make_room.weights_intact")),
    (check_training, ("swap.training",)),
    (check_dlpack, ("swap.dlpack.moved", "swap.dlpack.cupy", "swap.dlpack.triton", "swap.dlpack.jax")),
    (check_ipc, ("swap.ipc_refused_explained", "swap.ipc_tiering_off")),
]


def checks(plan=CHECKS, leave_gib=LEAVE_GIB):
    """Runs each check of `plan` (check, its verdict names) beside one balloon."""
    foreign = Balloon(leave_gib)
    try:
        for check, names in plan:
            if time.monotonic() > STARTED + DEADLINE_S - 10:
                fail_all(names, f"not run: the program's {DEADLINE_S} s had run out")
                continue
            why = foreign.ensure()
            if why:
                fail_all(names, why)
                continue
            failed = COUNTS["failed"]
            try:
                check(foreign)
            except Exception as error:  # a crash of this program's own part: its verdicts fail
                traceback.print_exc()
                if COUNTS["failed"] == failed:
                    fail_all(names, f"{check.__name__} crashed: {type(error).__name__}: {str(error)[:300]}")
    finally:
        for proc in list(RUNNING):
            kill_group(proc)
        foreign.kill()
    kv(f"{PREFIX}.seconds", f"{time.monotonic() - STARTED:.1f}")


def role(name, args):
    """A role's process: dies with this program; a crash is reported on stderr (the
    program reports the verdicts it did not give)."""
    die_with_parent()
    if name == "balloon":
        return balloon(float(args[0]))
    import tiering_swap_dlpack
    import tiering_swap_roles

    roles = {"train": tiering_swap_roles.role_train, "attributes": tiering_swap_roles.role_attributes,
             "ipc": tiering_swap_roles.role_ipc, "make_room": tiering_swap_roles.role_make_room,
             "dlpack": tiering_swap_dlpack.role_dlpack}
    if name not in roles:
        raise SystemExit(f"unknown role {name}")
    roles[name](*args)
    sys.stdout.flush()


def program(entry, prefix, role_of, body):
    """A check program's main (this one's, tiering_ranges.py's, longctx_check.py's): with
    arguments, the role they name (`role_of(name, args)`); without, `body()` with the
    harness set to `entry` (its roles' program) and `prefix` (its figures), a work folder
    and its start time; its roles killed and the folder removed after it; exits 1 when a
    verdict failed."""
    global ENTRY, PREFIX, WORK, STARTED
    ENTRY, PREFIX = os.path.abspath(entry), prefix
    if len(sys.argv) > 1:
        return role_of(sys.argv[1], sys.argv[2:])
    # run.sh's timeout sends SIGTERM: end through the finally below, which kills the roles.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    WORK = tempfile.mkdtemp(prefix=f"gb-{prefix}-")
    STARTED = time.monotonic()
    try:
        body()
    finally:
        for proc in list(RUNNING):
            kill_group(proc)
        shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(1 if COUNTS["failed"] else 0)


def main():
    program(__file__, PREFIX, role, checks)


if __name__ == "__main__":
    main()
