#!/usr/bin/env bash
# Staged-install test (`make install-test`, part of `make test`): scripts/install.sh into
# a temporary DESTDIR, checking every file, mode and content it installs, that it changes
# nothing outside DESTDIR (system commands are replaced by recorders that must stay
# silent), that the ollama drop-in appears only beside an ollama unit, that a failed
# DKMS build leaves nothing registered and a kernel without module support is named
# (tests/install/dkms.sh), and that scripts/uninstall.sh leaves DESTDIR as it found it.
# Ends with `N passed, M failed`.
#
# The module is built and installed into the stage when the running kernel's headers
# are present (GREENBOOST_TEST_KMOD=auto, the default); CI machines often run a kernel
# nobody can build for, so it is skipped otherwise, and said so. GREENBOOST_TEST_KMOD=1
# insists, 0 skips.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
work=$(mktemp -d /tmp/greenboost-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

check() {
  local what=$1; shift
  if "$@" >"$work/check.out" 2>&1; then
    passed=$((passed + 1)); echo "ok   $what"
  else
    failed=$((failed + 1)); echo "FAIL $what"; sed 's/^/     /' "$work/check.out" | head -20
  fi
}

# The real dkms (if installed) for the private-tree DKMS build below, before the recorder
# takes its name.
real_dkms=$(command -v dkms || true)

# --- recorders for every command that would change the system -------------------------
fakebin=$work/fakebin
mkdir -p "$fakebin"
for cmd in modprobe rmmod insmod depmod udevadm systemctl groupadd groupdel usermod gpasswd \
           dkms apt-get apt mokutil ldconfig runuser swapon swapoff mkswap; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/system-calls"\nexit 0\n' "$cmd" "$work" > "$fakebin/$cmd"
  chmod +x "$fakebin/$cmd"
done
export PATH="$fakebin:$PATH"
no_system_calls() { [ ! -s "$work/system-calls" ] || { cat "$work/system-calls"; false; }; }

# What an install could touch outside DESTDIR, before and after: the files it would
# edit, by content, and the directories it would add to, by their entries.
system_snapshot() {
  for f in /etc/group /etc/gshadow /etc/ld.so.preload /etc/systemd/system/ollama.service.d/greenboost.conf; do
    [ -e "$f" ] && sha256sum "$f" || echo "absent $f"
  done
  for d in /etc/udev/rules.d /etc/modprobe.d /etc/modules-load.d /etc/security/limits.d \
           /etc/systemd/system /usr/local/bin /usr/local/lib /usr/local/include /usr/local/share \
           /usr/src "/lib/modules/$(uname -r)" "/lib/modules/$(uname -r)/extra" /var/cache/greenboost /var/lib/dkms \
           /var/lib/greenboost; do
    echo "== $d"; ls -A "$d" 2>&1
  done
}
system_snapshot > "$work/system-before"

# --- build once; every install below uses these binaries ------------------------------
# (GREENBOOST_NO_BUILD=1: use what target/release already holds.)
if [ "${GREENBOOST_NO_BUILD:-0}" != 1 ]; then
  echo "building the shim and the CLI (release)"
  cargo build --release -p greenboost-shim -p greenboost-cli >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log"; echo "0 passed, 1 failed"; exit 1; }
fi
export GREENBOOST_NO_BUILD=1 GREENBOOST_NO_APT=1

krel=$(uname -r)
case ${GREENBOOST_TEST_KMOD:-auto} in
  1) build_kmod=1 ;;
  0) build_kmod=0; echo "note: module build skipped (GREENBOOST_TEST_KMOD=0)" ;;
  *) if [ -f "/lib/modules/$krel/build/.config" ]; then build_kmod=1
     else build_kmod=0
       echo "note: no headers for the running kernel $krel (/lib/modules/$krel/build): the staged module build is skipped; the test still checks that a kernel without headers gives a clear message and a working install"
     fi ;;
esac

# stage_install DIR [ENV...]: runs install.sh into DIR, output in DIR.log
stage_install() {
  local dir=$1; shift
  env DESTDIR="$dir" "$@" scripts/install.sh >"$dir.log" 2>&1
}
stage_uninstall() {
  local dir=$1; shift
  env DESTDIR="$dir" "$@" scripts/uninstall.sh >>"$dir.log" 2>&1
}
files_in() { (cd "$1" && find . -type f -o -type l | sed 's#^\./#/#' | sort); }
mode_of() { stat -c %a "$1"; }
content_lines() { grep -v '^[[:space:]]*#' "$1" | grep -v '^[[:space:]]*$'; }

# --- case 1: plain staged install, no ollama ------------------------------------------
stage=$work/stage
mkdir -p "$stage"
skip=()
[ $build_kmod = 1 ] || skip=(GREENBOOST_SKIP_KMOD=1)
check "staged install succeeds" stage_install "$stage" "${skip[@]}"
cat "$stage.log" | sed 's/^/     | /'

# The manual pages are one per subcommand: the built CLI names them.
target/release/greenboost man "$work/man" >/dev/null
expected_outside_src="/etc/modprobe.d/greenboost.conf
/etc/security/limits.d/greenboost.conf
/etc/udev/rules.d/70-greenboost.rules
/usr/local/bin/greenboost
/usr/local/include/greenboost.h
/usr/local/lib/libgreenboost_cuda.so
/usr/local/share/greenboost/install-manifest
/usr/local/share/bash-completion/completions/greenboost
/usr/local/share/zsh/site-functions/_greenboost
/usr/local/share/fish/vendor_completions.d/greenboost.fish
/usr/local/share/man/man4/greenboost.4
$(cd "$work/man" && ls *.1 | sed 's#^#/usr/local/share/man/man1/#')"
[ $build_kmod = 1 ] && expected_outside_src="/lib/modules/$krel/extra/greenboost.ko
/etc/modules-load.d/greenboost.conf
$expected_outside_src"
check "installed file list outside /usr/src is exactly the expected one" \
  diff <(echo "$expected_outside_src" | sort) <(files_in "$stage" | grep -v "^/usr/src/")
check "nothing outside the expected top-level directories" \
  diff <(files_in "$stage" | cut -d/ -f2 | sort -u) <(printf '%s\n' etc usr $( [ $build_kmod = 1 ] && echo lib) | sort)

check "CLI and shim are 0755, header and configuration 0644" bash -c "
  [ \$(stat -c %a '$stage/usr/local/bin/greenboost') = 755 ] &&
  [ \$(stat -c %a '$stage/usr/local/lib/libgreenboost_cuda.so') = 755 ] &&
  [ \$(stat -c %a '$stage/usr/local/include/greenboost.h') = 644 ] &&
  for f in \$(find '$stage/etc' -type f); do [ \$(stat -c %a \"\$f\") = 644 ] || { echo \"\$f\"; exit 1; }; done"
check "directories the install created are 0755" bash -c \
  "[ -z \"\$(find '$stage' -mindepth 1 -type d ! -perm 0755)\" ] || find '$stage' -mindepth 1 -type d ! -perm 0755"
check "installed binaries are the built ones" bash -c \
  "cmp target/release/greenboost '$stage/usr/local/bin/greenboost' && cmp target/release/libgreenboost_cuda.so '$stage/usr/local/lib/libgreenboost_cuda.so'"

udev=$stage/etc/udev/rules.d/70-greenboost.rules
check "udev rule: one rule, node group greenboost, mode 0660" \
  test "$(content_lines "$udev")" = 'KERNEL=="greenboost", SUBSYSTEM=="misc", GROUP="greenboost", MODE="0660"'
check "udev rule is commented (what it does, how to join the group)" \
  bash -c "[ \$(grep -c '^#' '$udev') -ge 5 ] && grep -q 'usermod -aG greenboost' '$udev'"
modprobe_conf=$stage/etc/modprobe.d/greenboost.conf
check "modprobe.d options are all commented out (module defaults apply)" \
  bash -c "[ -z \"\$(grep -v '^[[:space:]]*#' '$modprobe_conf' | grep -v '^[[:space:]]*\$')\" ] && grep -q '^# options greenboost ' '$modprobe_conf'"
params=$(sed -n 's/^module_param(\([a-z0-9_]*\),.*/\1/p' kmod/glue.c | sort)
check "modprobe.d documents exactly the module's parameters (kmod/glue.c)" \
  diff <(echo "$params") <(grep '^# options greenboost' "$modprobe_conf" | tr ' ' '\n' | sed -n 's/=.*//p' | sort)
if [ $build_kmod = 1 ]; then
  check "modules-load.d loads greenboost" test "$(content_lines "$stage/etc/modules-load.d/greenboost.conf")" = greenboost
else
  check "no modules-load.d entry without a module (it would fail at every boot)" test ! -e "$stage/etc/modules-load.d"
fi
check "limits.d lifts memlock for the greenboost group only" \
  diff <(content_lines "$stage/etc/security/limits.d/greenboost.conf" | tr -s ' \t' ' ') \
       <(printf '@greenboost soft memlock unlimited\n@greenboost hard memlock unlimited\n')

src=$stage/usr/src/greenboost-$version
check "DKMS: dkms.conf names the module, version and the project's build" bash -c "
  grep -qx 'PACKAGE_NAME=\"greenboost\"' '$src/dkms.conf' &&
  grep -qx 'PACKAGE_VERSION=\"$version\"' '$src/dkms.conf' &&
  grep -qx 'BUILT_MODULE_NAME\[0\]=\"greenboost\"' '$src/dkms.conf' &&
  grep -qx 'MAKE\[0\]=\"bash packaging/dkms/dkms-build.sh \${kernelver} \${kernel_source_dir}\"' '$src/dkms.conf' &&
  grep -qx 'AUTOINSTALL=\"yes\"' '$src/dkms.conf' && ! grep -q @VERSION@ '$src/dkms.conf'"
check "DKMS source tree has what build-kmod.sh needs, executables kept executable" bash -c "
  for f in Kbuild kmod/greenboost.rs kmod/glue.c abi/src/greenboost_abi.rs scripts/lib.sh \
           scripts/build-stock-tree.sh scripts/check-module-imports.py scripts/kbuild/rust_rt.kbuild; do
    [ -f '$src/'\$f ] || { echo \"missing \$f\"; exit 1; }; done
  [ -x '$src/scripts/build-kmod.sh' ] && [ -x '$src/packaging/dkms/dkms-build.sh' ] &&
  bash -n '$src/packaging/dkms/dkms-build.sh'"
check "DKMS source files are identical to the repository's" bash -c "
  cd '$src' && find . -type f ! -name dkms.conf | while read -r f; do cmp -s \"\$f\" '$root/'\"\$f\" || { echo \"differs: \$f\"; exit 1; }; done"
check "DKMS source has every kmod/ file of the repository" \
  diff <(cd kmod && find . -type f ! -name '*.o' ! -name '*.cmd' | sort) <(cd "$src/kmod" && find . -type f | sort)

check "no ld.so.preload anywhere, and nothing installed mentions writing it" bash -c \
  "[ -z \"\$(find '$stage' -name 'ld.so.preload*')\" ] && ! grep -rqs 'ld.so.preload' '$stage/etc'"
check "no ollama drop-in without an ollama unit" test ! -e "$stage/etc/systemd"
check "manifest lists every installed file" \
  diff <(files_in "$stage" | grep -v /install-manifest) <(sed -n 's/^file //p' "$stage/usr/local/share/greenboost/install-manifest" | sort)
check "no system command was run (no modprobe/udevadm/systemctl/groupadd/dkms/apt-get)" no_system_calls

if [ $build_kmod = 1 ]; then
  check "the staged module is built for $krel" bash -c \
    "modinfo -F vermagic '$stage/lib/modules/$krel/extra/greenboost.ko' | grep -q '^$krel '"
else
  check "skipping the module says so" grep -q 'module not built (GREENBOOST_SKIP_KMOD=1)' "$stage.log"
fi

# The installed CLI works from the stage and finds the shim installed beside it.
cli=$stage/usr/local/bin/greenboost
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
check "installed CLI runs: --version, with the commit" bash -c "'$cli' --version | grep -qx 'greenboost $version (commit $commit)'"
check "manual pages: greenboost(1) and greenboost(4) with every module parameter" bash -c "
  grep -q '^.TH greenboost 1' '$stage/usr/local/share/man/man1/greenboost.1' &&
  for p in $(echo $params); do grep -q \"fB\$p\" '$stage/usr/local/share/man/man4/greenboost.4' || { echo \$p; exit 1; }; done"
check "bash completion parses and completes the subcommands" bash -c "
  bash -n '$stage/usr/local/share/bash-completion/completions/greenboost' &&
  grep -q 'service' '$stage/usr/local/share/bash-completion/completions/greenboost'"
check "installed CLI 'run' preloads the shim installed beside it" bash -c "
  out=\$(GREENBOOST_DEVICE=/nonexistent '$cli' run -q --vram-budget 1G -- sh -c 'echo \"\$LD_PRELOAD \$GREENBOOST_VRAM_BUDGET\"')
  [ \"\$out\" = '$stage/usr/local/lib/libgreenboost_cuda.so 1073741824' ] || { echo \"\$out\"; false; }"
check "installed CLI 'status --json' answers without the module" bash -c "
  GREENBOOST_SYSFS_ROOT='$work/nosys' GREENBOOST_NVML_LIBRARY=none '$cli' status --json | grep -q '\"loaded\": false'"
check "installed CLI 'demo' without a GPU explains itself and succeeds" bash -c "
  out=\$(GREENBOOST_CUDA_LIBRARY=libcuda-absent.so.1 '$cli' demo) && grep -q 'Nothing was run' <<<\"\$out\""

# Installing twice changes nothing and duplicates nothing.
files_in "$stage" > "$work/files-first"
check "re-install succeeds" stage_install "$stage" "${skip[@]}"
check "re-install leaves the same files" diff "$work/files-first" <(files_in "$stage")
check "re-install does not duplicate manifest entries" \
  test -z "$(sort "$stage/usr/local/share/greenboost/install-manifest" | uniq -d)"

check "uninstall succeeds" stage_uninstall "$stage"
check "uninstall leaves the stage empty (no file, no directory)" \
  test -z "$(find "$stage" -mindepth 1)"
check "a second uninstall fails, saying nothing is installed" bash -c \
  "out=\$(DESTDIR='$stage' scripts/uninstall.sh 2>&1); [ \$? -ne 0 ] && grep -q 'no install manifest' <<<\"\$out\""
check "still no system command after uninstall" no_system_calls

# --- case 2: an ollama unit exists (in the stage), other PREFIX -----------------------
stage2=$work/stage-ollama
mkdir -p "$stage2/lib/systemd/system"
printf '[Unit]\nDescription=Ollama\n[Service]\nExecStart=/usr/bin/ollama serve\n' > "$stage2/lib/systemd/system/ollama.service"
check "staged install with an ollama unit succeeds" stage_install "$stage2" GREENBOOST_SKIP_KMOD=1 PREFIX=/opt/greenboost
dropin=$stage2/etc/systemd/system/ollama.service.d/greenboost.conf
check "ollama drop-in is installed, 0644" bash -c "[ -f '$dropin' ] && [ \$(stat -c %a '$dropin') = 644 ]"
check "drop-in: [Service] with LD_PRELOAD of the shim under PREFIX, group and memlock" \
  diff <(content_lines "$dropin") <(printf '%s\n' '[Service]' \
    'Environment="LD_PRELOAD=/opt/greenboost/lib/libgreenboost_cuda.so"' \
    'Environment="GREENBOOST_REPORT=combined"' 'Environment="GREENBOOST_LOG=info"' \
    'SupplementaryGroups=greenboost' 'LimitMEMLOCK=infinity')
check "the shim the drop-in preloads is installed there" test -f "$stage2/opt/greenboost/lib/libgreenboost_cuda.so"
check "LD_PRELOAD is set nowhere else in /etc" bash -c \
  "[ \"\$(grep -rl LD_PRELOAD '$stage2/etc')\" = '$dropin' ]"
check "the ollama unit itself is untouched" \
  diff "$stage2/lib/systemd/system/ollama.service" <(printf '[Unit]\nDescription=Ollama\n[Service]\nExecStart=/usr/bin/ollama serve\n')
check "uninstall with the same PREFIX succeeds" stage_uninstall "$stage2" PREFIX=/opt/greenboost
check "uninstall removes the drop-in and its directory, keeps the ollama unit" \
  diff <(cd "$stage2" && find . | sort) <(printf '%s\n' . ./lib ./lib/systemd ./lib/systemd/system ./lib/systemd/system/ollama.service)

# --- case 3: a kernel without headers: clear message, the rest installs ---------------
stage3=$work/stage-noheaders
mkdir -p "$stage3"
nokernel=0.0.0-greenboost-test-nokernel
check "install for a kernel without headers still succeeds" stage_install "$stage3" KERNELRELEASE=$nokernel
check "it names the missing headers package" grep -q "linux-headers-$nokernel" "$stage3.log"
check "it says the userspace backend works meanwhile" grep -q "userspace backend" "$stage3.log"
check "it installs no module and no boot-time load, everything else" bash -c \
  "[ ! -e '$stage3/lib' ] && [ ! -e '$stage3/etc/modules-load.d' ] && [ -f '$stage3/usr/local/lib/libgreenboost_cuda.so' ] && [ -f '$stage3/etc/udev/rules.d/70-greenboost.rules' ]"
check "uninstall after it leaves the stage empty" bash -c \
  "DESTDIR='$stage3' scripts/uninstall.sh >/dev/null && [ -z \"\$(find '$stage3' -mindepth 1)\" ]"

# --- case 3a: a kernel built without module support: named, nothing built -------------
stage_nomod=$work/stage-nomodules
nomod_headers=$work/nomodules-headers
mkdir -p "$stage_nomod" "$nomod_headers"
printf '# CONFIG_MODULES is not set\nCONFIG_RUST=y\n' > "$nomod_headers/.config"
check "install for a kernel without module support succeeds" \
  stage_install "$stage_nomod" KERNELRELEASE=0.0.0-greenboost-test-nomodules KERNEL_HEADERS="$nomod_headers"
check "it names the kernel's missing module support" \
  grep -q "kernel 0.0.0-greenboost-test-nomodules cannot load modules (CONFIG_MODULES is off in $nomod_headers/.config" "$stage_nomod.log"
check "it advises no module build (no make kmod, headers or DKMS log)" bash -c \
  "! grep -q 'make kmod\|linux-headers\|make.log\|lists what the module build needs' '$stage_nomod.log'"
check "it installs no module and no boot-time load" bash -c \
  "[ ! -e '$stage_nomod/lib' ] && [ ! -e '$stage_nomod/etc/modules-load.d' ]"
check "uninstall after it leaves the stage empty" bash -c \
  "DESTDIR='$stage_nomod' scripts/uninstall.sh >/dev/null && [ -z \"\$(find '$stage_nomod' -mindepth 1)\" ]"
check "an install without a user added says how to add users to the greenboost group" \
  grep -q 'usermod -aG greenboost USER' "$stage_nomod.log"

# --- case 3b: swap files recorded by `greenboost swap add` ------------------------------
# The record is written as the CLI writes it (cli/src/swap/record.rs: a comment, then one
# absolute path a line). A staged uninstall deletes the recorded files under DESTDIR
# (swapoff is for the system only), keeps what is not a regular file any more, and
# leaves the directories the test made itself.
stage_swap=$work/stage-swap
mkdir -p "$stage_swap/var/lib/greenboost" "$stage_swap/srv/nvme"
check "staged install for the swap-file case succeeds" stage_install "$stage_swap" GREENBOOST_SKIP_KMOD=1
printf '%s\n' "# Swap files created by \`greenboost swap add\`; \`greenboost swap remove\` and scripts/uninstall.sh remove them." \
  /var/lib/greenboost/t3.swap "/srv/nvme/t3 swap" /srv/nvme/gone.swap /srv/nvme/link.swap \
  > "$stage_swap/var/lib/greenboost/swapfiles"
head -c 65536 /dev/zero > "$stage_swap/var/lib/greenboost/t3.swap"
head -c 65536 /dev/zero > "$stage_swap/srv/nvme/t3 swap"
echo "not ours" > "$stage_swap/srv/nvme/other"
ln -s other "$stage_swap/srv/nvme/link.swap"
check "uninstall with recorded swap files succeeds" stage_uninstall "$stage_swap"
check "it says which swap files it removed" bash -c \
  "grep -q 'removed the swap file /var/lib/greenboost/t3.swap' '$stage_swap.log' && grep -q 'removed the swap file /srv/nvme/t3 swap' '$stage_swap.log'"
check "it removes the recorded files, the record and its directory, keeps a recorded symlink and everything else" \
  diff <(cd "$stage_swap" && find . | sort) <(printf '%s\n' . ./srv ./srv/nvme ./srv/nvme/link.swap ./srv/nvme/other ./var ./var/lib)
check "it warns about the symlink instead of following it" grep -q 'link.swap is not a regular file any more' "$stage_swap.log"
check "the file the symlink points to is untouched" test "$(cat "$stage_swap/srv/nvme/other")" = "not ours"

# --- case 3c: what processes under the shim leave in /dev/shm ---------------------------
# Live tiering's lock files and the records of killed processes go; a lock a process holds
# and the record of a running process stay, as does anything else there.
stage_shm=$work/stage-shm
shm=$stage_shm/dev/shm
mkdir -p "$shm"
check "staged install for the /dev/shm case succeeds" stage_install "$stage_shm" GREENBOOST_SKIP_KMOD=1
touch "$shm/greenboost-tier.lock" "$shm/greenboost-tier.0000:1b:00.lock" "$shm/greenboost-tier.0000:3d:00.lock" \
  "$shm/greenboost-shim.$$" "$shm/greenboost-shim.999999999" "$shm/other"
flock -x "$shm/greenboost-tier.0000:3d:00.lock" sleep 60 &
holder=$!
for _ in $(seq 50); do flock -n "$shm/greenboost-tier.0000:3d:00.lock" true || break; sleep 0.1; done
check "uninstall with lock files and records in /dev/shm succeeds" stage_uninstall "$stage_shm"
kill $holder 2>/dev/null; wait $holder 2>/dev/null
check "it removes free lock files and a dead process's record, keeps what is in use and the rest" \
  diff <(cd "$shm" && ls -A | sort) <(printf '%s\n' "greenboost-shim.$$" greenboost-tier.0000:3d:00.lock other | sort)
check "it says which lock it kept and why" grep -q 'kept /dev/shm/greenboost-tier.0000:3d:00.lock: a process under the shim holds it' "$stage_shm.log"

# --- case 3d: DKMS's failed build, a kernel without /proc/modules ----------------------
. tests/install/dkms.sh

# --- case 4: the module for Debian's stock kernel, from the QEMU suite's headers ---------
# `make kmod-test` unpacks linux-headers of the stock kernel into the build cache; when
# they are there, the staged install builds the self-contained module against them.
. scripts/lib.sh
stock_headers=$GB_CACHE/debian-kernel/$GB_STOCK_KREL/root/usr/src/linux-headers-$GB_STOCK_KREL
if [ -f "$stock_headers/.config" ] && [ "${GREENBOOST_TEST_KMOD:-auto}" != 0 ]; then
  stage4=$work/stage-stock
  mkdir -p "$stage4"
  check "staged install builds the module for $GB_STOCK_KREL (KERNEL_HEADERS)" \
    stage_install "$stage4" KERNELRELEASE="$GB_STOCK_KREL" KERNEL_HEADERS="$stock_headers"
  ko=$stage4/lib/modules/$GB_STOCK_KREL/extra/greenboost.ko
  check "the module is installed 0644 in /lib/modules/$GB_STOCK_KREL/extra" bash -c "[ \$(stat -c %a '$ko') = 644 ]"
  check "with the module, modules-load.d loads it at boot" \
    test "$(content_lines "$stage4/etc/modules-load.d/greenboost.conf")" = greenboost
  check "its vermagic is $GB_STOCK_KREL and it has the parameters modprobe.d documents" bash -c "
    modinfo -F vermagic '$ko' | grep -q '^$GB_STOCK_KREL ' &&
    diff <(modinfo -F parm '$ko' | cut -d: -f1 | sort) <(echo '$params')"
  # DKMS, in private trees (nothing under /var/lib/dkms or /lib/modules): the installed
  # dkms.conf must build the same module for a kernel, as it will after a kernel update.
  if [ -n "$real_dkms" ]; then
    dkms_tree=$work/dkms-tree
    mkdir -p "$dkms_tree"
    dkms_args=(--dkmstree "$dkms_tree" --sourcetree "$stage4/usr/src" --installtree "$work/dkms-install")
    check "DKMS (private tree) adds the installed source tree" \
      "$real_dkms" add greenboost/"$version" "${dkms_args[@]}"
    check "DKMS builds greenboost.ko for $GB_STOCK_KREL with dkms.conf's MAKE" \
      env GREENBOOST_CACHE="$GB_CACHE" "$real_dkms" build greenboost/"$version" -k "$GB_STOCK_KREL" \
        --kernelsourcedir "$stock_headers" "${dkms_args[@]}"
    check "the DKMS-built module has vermagic $GB_STOCK_KREL" bash -c \
      "modinfo -F vermagic \$(find '$dkms_tree/greenboost' -name 'greenboost.ko*' | head -1) | grep -q '^$GB_STOCK_KREL '"
  else
    echo "note: dkms is not installed: the DKMS build of the installed dkms.conf is skipped (apt-get install dkms)"
  fi
  check "uninstall removes the module and leaves the stage empty" bash -c \
    "DESTDIR='$stage4' scripts/uninstall.sh >/dev/null && [ -z \"\$(find '$stage4' -mindepth 1)\" ]"
else
  echo "note: the stock kernel's headers are not in the build cache ($stock_headers; \`make kmod-test\` puts them there): the staged build for $GB_STOCK_KREL is skipped"
fi

# --- the scripts themselves ------------------------------------------------------------
# Run from a world-readable copy: the checkout itself may sit in a directory that user
# 65534 cannot enter (a clone under `mktemp -d`), which would fail before the root check.
unprivileged_copy=$(mktemp -d)
chmod 755 "$unprivileged_copy"
mkdir "$unprivileged_copy/scripts"
cp scripts/install.sh "$unprivileged_copy/scripts/"
cp Cargo.toml "$unprivileged_copy/"
check "install.sh refuses a system install without root" bash -c \
  "out=\$(setpriv --reuid=65534 --regid=65534 --clear-groups $unprivileged_copy/scripts/install.sh 2>&1); [ \$? -ne 0 ] && grep -q 'sudo make install' <<<\"\$out\""
rm -rf "$unprivileged_copy"
check "install/uninstall scripts parse" bash -c "bash -n scripts/install.sh && bash -n scripts/uninstall.sh"
check "no system command was run in any staged case" no_system_calls
system_snapshot > "$work/system-after"
check "nothing outside the stages changed" diff "$work/system-before" "$work/system-after"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
