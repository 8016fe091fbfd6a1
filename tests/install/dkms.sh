# Sourced by tests/install/run.sh (its check, work, version, krel, stage_install): the
# module step's paths that act on the system, which a plain staged install never reaches.
#
# 1. DKMS: scripts/install-dkms.sh's dkms_install_module against a stand-in dkms that
#    keeps its registrations in a file (add/remove/status) and fails or passes
#    `dkms install` as asked. A failed build must leave nothing registered.
# 2. A running kernel without module support (no /proc/modules): a staged install in a
#    mount namespace where /proc is an empty directory.

dkmsbin=$work/dkmsbin
mkdir -p "$dkmsbin"
cat > "$dkmsbin/dkms" <<'FAKE'
#!/bin/bash
# Stand-in dkms: logs each call; FAKE_DKMS_DIR/registered holds the registrations;
# FAKE_DKMS_BUILD=fail makes `install` fail after writing a make.log where DKMS would.
echo "$*" >> "$FAKE_DKMS_DIR/calls"
registry=$FAKE_DKMS_DIR/registered
touch "$registry"
case $1 in
  add) grep -qx "$2" "$registry" || echo "$2" >> "$registry" ;;
  remove) grep -vx "$2" "$registry" > "$registry.new"; mv "$registry.new" "$registry" ;;
  status) sed 's/$/: added/' "$registry" ;;
  install)
    [ "$FAKE_DKMS_BUILD" = fail ] || exit 0
    log=$FAKE_DKMS_DIR/dkms-tree/${2%/*}/${2#*/}/build/make.log
    mkdir -p "${log%/*}" && echo "error: the stand-in build failed" > "$log"
    echo "Error! Bad return status for module build" >&2; exit 10 ;;
esac
FAKE
chmod +x "$dkmsbin/dkms"

# run_dkms_case BUILD: dkms_install_module with the stand-in (BUILD: fail or pass), in
# $work/dkms-BUILD: calls, registered, manifest (record/forget), note, cache/.
run_dkms_case() {
  local dir=$work/dkms-$1
  mkdir -p "$dir"
  PATH="$dkmsbin:$PATH" FAKE_DKMS_DIR=$dir FAKE_DKMS_BUILD=$1 bash -c '
    set -euo pipefail
    . scripts/install-dkms.sh
    version=$1 krel=$2 dir=$3 system_cache=$3/cache dkms_tree=$3/dkms-tree KERNEL_HEADERS=
    record() { echo "record $*" >> "$dir/manifest"; }
    forget() { echo "forget $*" >> "$dir/manifest"; }
    status=0
    dkms_install_module 2>>"$dir/stderr" || status=$?
    echo "$module_note" > "$dir/note"
    exit $status' _ "$version" "$krel" "$dir"
}
failed_build() { ! run_dkms_case fail; }
check "DKMS: a failed build makes the module step fail" failed_build
fail_dir=$work/dkms-fail
check "DKMS: it registered greenboost/$version and asked DKMS to build it for $krel" bash -c "
  grep -qx 'add greenboost/$version' '$fail_dir/calls' && grep -q '^install greenboost/$version -k $krel' '$fail_dir/calls'"
check "DKMS: after the failed build it removes the registration" \
  test "$(sed -n '/^install /,$p' "$fail_dir/calls" | tail -n +2)" = "remove greenboost/$version --all"
check "DKMS: \`dkms status\` then lists no GreenBoost" \
  test -z "$(FAKE_DKMS_DIR=$fail_dir "$dkmsbin/dkms" status)"
check "DKMS: the manifest forgets the registration it recorded" \
  diff "$fail_dir/manifest" <(printf '%s\n' "record dkms greenboost/$version" "forget dkms greenboost/$version")
check "DKMS: the build's make.log is kept in the cache, and the message names it and the removal" bash -c "
  cmp '$fail_dir/dkms-tree/greenboost/$version/build/make.log' '$fail_dir/cache/dkms-make-$krel.log' &&
  grep -q 'its log: $fail_dir/cache/dkms-make-$krel.log); its registration is removed' '$fail_dir/note'"
succeeded_build_kept() {
  run_dkms_case pass && [ "$(FAKE_DKMS_DIR=$work/dkms-pass "$dkmsbin/dkms" status)" = "greenboost/$version: added" ] &&
    diff "$work/dkms-pass/manifest" <(echo "record dkms greenboost/$version") &&
    grep -q 'built and installed by DKMS' "$work/dkms-pass/note"
}
check "DKMS: a build that succeeds keeps the registration and its manifest entry" succeeded_build_kept

# --- a running kernel without /proc/modules ----------------------------------------------
# Where /proc/modules exists, the install runs in a mount namespace whose /proc is a
# tmpfs of links to every entry of the real one but modules (/dev/fd, /proc/self and the
# rest keep working). Root gets the namespace with unshare -m, others need -r.
without_proc_modules=()
if [ -e /proc/modules ]; then
  mkdir -p "$work/real-proc"
  hide='real=$1; shift; mount --rbind /proc "$real" && mount -t tmpfs none /proc &&
    for entry in "$real"/*; do [ "${entry##*/}" = modules ] || ln -s "$entry" /proc/; done && "$@"'
  for try in "unshare -m" "unshare -rm"; do
    if $try bash -c "$hide" _ "$work/real-proc" test ! -e /proc/modules 2>/dev/null; then
      read -ra without_proc_modules <<<"$try"
      without_proc_modules+=(bash -c "$hide" _ "$work/real-proc")
      break
    fi
  done
fi
if [ -e /proc/modules ] && [ ${#without_proc_modules[@]} -eq 0 ]; then
  echo "note: no mount namespace here (unshare -m / -rm refused): the install without /proc/modules is skipped"
else
  stage_noproc=$work/stage-noproc
  mkdir -p "$stage_noproc"
  install_without_proc() {
    "${without_proc_modules[@]}" env DESTDIR="$stage_noproc" scripts/install.sh >"$stage_noproc.log" 2>&1
  }
  check "install on a running kernel without /proc/modules succeeds" install_without_proc
  check "it names the kernel's missing module support" \
    grep -q "kernel $krel cannot load modules (no /proc/modules: it was built without CONFIG_MODULES)" "$stage_noproc.log"
  check "it advises no module build (no make kmod, headers or DKMS log)" bash -c \
    "! grep -q 'make kmod\|linux-headers\|make.log\|building the module' '$stage_noproc.log'"
  check "it installs no module and no boot-time load" bash -c \
    "[ ! -e '$stage_noproc/lib' ] && [ ! -e '$stage_noproc/etc/modules-load.d' ] && [ -f '$stage_noproc/usr/local/bin/greenboost' ]"
  check "uninstall after it leaves the stage empty" bash -c \
    "DESTDIR='$stage_noproc' scripts/uninstall.sh >/dev/null && [ -z \"\$(find '$stage_noproc' -mindepth 1)\" ]"
fi
