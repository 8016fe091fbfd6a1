# Sourced by tests/deb/root-suite.sh (its root, check, in_root, out) with the greenboost
# package installed in the root: `greenboost run` of a fake-CUDA program, then the same
# program in stand-ins for containers, which are what a container engine makes of the
# README's flags without the engine: a mount namespace with a /dev/shm of its own
# (docker's and podman's default) or the host's (--ipc=host), a pid namespace of its
# own (the default) or the host's (--pid=host), the shim from the package inside the
# "image" (the root) or mounted from outside (-v). No GPU, no container engine: the
# fake CUDA libraries are the GPU (tests/fakecuda/README.md).
#
# The program is gbballoon (tests/fakecuda/programs/balloon.c): cuMemAlloc of 32 MiB
# under a VRAM budget of 16 MiB, so the shim places it in T2 (its userspace backend:
# no module in the root) and publishes the process in /dev/shm/greenboost-shim.<pid>,
# where `greenboost status` finds it. It holds the memory until SIGTERM.

t2=$((32 << 20))
fake_env="LD_LIBRARY_PATH=/mnt/fakecuda/lib FAKECUDA_VRAM=64M"

# job SCRIPT NAME: the shell script the "container" runs: the balloon (started by SCRIPT's
# command line) in the background, its own view of status once it is ready, then it
# waits for /tmp/NAME.stop and stops the balloon. Files: /tmp/NAME.{out,pid,inside,maps,ready}.
job() {
  cat <<EOF
$1 > /tmp/$2.out 2>&1 &
pid=\$!
echo \$pid > /tmp/$2.pid
for i in \$(seq 100); do grep -q '^ready' /tmp/$2.out && break; sleep 0.1; done
greenboost status --prometheus > /tmp/$2.inside 2>&1
grep libgreenboost_cuda /proc/\$pid/maps > /tmp/$2.maps
touch /tmp/$2.ready
while [ ! -e /tmp/$2.stop ]; do sleep 0.1; done
kill -TERM \$pid; wait \$pid
EOF
}

# container NAME SHM PID COMMAND: runs job in the background, SHM and PID private or host
container() {
  local name=$1 shm=$2 pid=$3 flags=(--mount)
  job "$4" "$name" > "$root/tmp/$name.sh"
  [ "$pid" = private ] && flags+=(--pid --fork)
  unshare "${flags[@]}" bash -c '
    root=$1 shm=$2 pid=$3 name=$4
    [ "$shm" = host ] || mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    [ "$pid" = host ] || mount -t proc proc "$root/proc"
    # -v HOST_SHIM:/opt/greenboost/libgreenboost_cuda.so:ro
    mount -t tmpfs -o mode=0755 opt "$root/opt" && cp "$root/usr/lib/libgreenboost_cuda.so" "$root/opt/"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh "/tmp/$name.sh"' \
    _ "$root" "$shm" "$pid" "$name" > "$root/tmp/$name.log" 2>&1 &
  for _ in $(seq 100); do [ -e "$root/tmp/$name.ready" ] && break; sleep 0.1; done
}
# stop NAME: tells the container's job to stop the balloon, waits for it
stop() { touch "$root/tmp/$1.stop"; wait; }
# sees FILE NAME: the status exposition in FILE lists NAME's balloon with its 32 MiB of T2
sees() { grep -q "^greenboost_process_tier_bytes{pid=\"$(cat "$root/tmp/$2.pid")\",.*tier=\"t2\".*} $t2\$" "$1"; }
host_status() { chroot "$root" greenboost status --prometheus > "$root/tmp/$1.host" 2>&1; }

# --- on the "host" (the root itself): greenboost run ---------------------------------
run_cmd="greenboost run --vram-budget 16M -- env $fake_env /mnt/fakecuda/bin/gbballoon 32M 0 120"
container plain host host "$run_cmd"
host_status plain
check "greenboost run: the fake-CUDA program is ready, with the shim from /usr/lib preloaded" bash -c "
  grep -q '^ready held=$t2' '$root/tmp/plain.out' &&
  grep -q 'LD_PRELOAD=/usr/lib/libgreenboost_cuda.so' <(tr '\0' '\n' < '$root/proc/$(cat "$root/tmp/plain.pid")/environ')"
check "its 32 MiB went to T2 (the fake device holds less than the budget)" bash -c "
  used=\$(sed -n 's/^ready held=[0-9]* device_used=//p' '$root/tmp/plain.out'); [ \$used -lt $((16 << 20)) ]"
check "status --prometheus lists the process with its 32 MiB of T2" sees "$root/tmp/plain.host" plain
check "status --prometheus: the module is not loaded, the backend is userspace" bash -c "
  grep -q '^greenboost_module_loaded 0' '$root/tmp/plain.host' || grep -q 'backend=\"userspace\"' '$root/tmp/plain.host'"
stop plain
check "the program ends cleanly and its record leaves /dev/shm" bash -c "
  grep -q '^ok balloon' '$root/tmp/plain.out' && [ -z \"\$(ls '$root/dev/shm' | grep greenboost-shim)\" ]"

# --- containers --------------------------------------------------------------------------
# docker run without --ipc=host / --pid=host: the shim works, status inside sees it, the
# host's status cannot (another /dev/shm).
container private private private "$run_cmd"
host_status private
check "container, private /dev/shm and pids: the program runs under the shim" grep -q '^ready held=' "$root/tmp/private.out"
check "container, private /dev/shm: status inside the container sees the process" sees "$root/tmp/private.inside" private
check "container, private /dev/shm: the host's status does not (the README says why)" bash -c \
  "! grep -q '^greenboost_process_tier_bytes{.*tier=\"t2\"' '$root/tmp/private.host'"
stop private
# --ipc=host alone: the record is on the host's /dev/shm, but under the container's pid,
# which the host's status checks against its own /proc and skips.
container ipc host private "$run_cmd"
host_status ipc
check "container, --ipc=host without --pid=host: the host's status still skips the process" bash -c \
  "! grep -q '^greenboost_process_tier_bytes{.*tier=\"t2\"' '$root/tmp/ipc.host'"
stop ipc
# --ipc=host --pid=host: the host sees it. Here the shim is mounted from outside the
# image (-v ...:/opt/greenboost/...) and preloaded by LD_PRELOAD, without the CLI.
container hostns host host "env LD_PRELOAD=/opt/libgreenboost_cuda.so GREENBOOST_VRAM_BUDGET=16M $fake_env /mnt/fakecuda/bin/gbballoon 32M 0 120"
host_status hostns
check "container, --ipc=host --pid=host, shim mounted: the host's status sees the process" sees "$root/tmp/hostns.host" hostns
check "its shim is the mounted one" grep -q ' /opt/libgreenboost_cuda.so$' "$root/tmp/hostns.maps"
stop hostns
check "every container's program ended cleanly" bash -c \
  "for n in private ipc hostns; do grep -q '^ok balloon' '$root/tmp/'\$n.out || { echo \$n; cat '$root/tmp/'\$n.out; exit 1; }; done"
