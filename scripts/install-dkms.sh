# Sourced by scripts/install.sh, and by tests/install/dkms.sh with a stand-in dkms: a
# staged install never reaches DKMS, so the test calls this function on its own.
# dkms_install_module: registers /usr/src/greenboost-$version with DKMS, which builds and
# installs the module for $krel (and every later kernel). On a failed build it removes
# the registration again. Reads install.sh's version, krel, system_cache, dkms_tree
# (/var/lib/dkms) and KERNEL_HEADERS; calls its record/forget; sets module_note.
dkms_install_module() {
  dkms remove "greenboost/$version" --all >/dev/null 2>&1 || true
  dkms add "greenboost/$version" >&2 && record dkms "greenboost/$version"
  local source_dir=()
  [ -n "${KERNEL_HEADERS:-}" ] && source_dir=(--kernelsourcedir "$KERNEL_HEADERS")
  if GREENBOOST_CACHE=$system_cache dkms install "greenboost/$version" -k "$krel" "${source_dir[@]}" >&2; then
    module_note="module built and installed by DKMS for $krel (rebuilt for new kernels)"
    return 0
  fi
  # A registration whose build failed would stay "added" in `dkms status` for good:
  # remove it, keeping its build log (when the build got that far) in the cache.
  local dkms_log=$dkms_tree/greenboost/$version/build/make.log kept_log=
  if [ -f "$dkms_log" ]; then
    kept_log=$system_cache/dkms-make-$krel.log
    mkdir -p "$system_cache" && cp "$dkms_log" "$kept_log"
  fi
  dkms remove "greenboost/$version" --all >/dev/null 2>&1 || true
  forget "dkms greenboost/$version"
  module_note="DKMS could not build the module for $krel (see above${kept_log:+; its log: $kept_log}); its registration is removed, so \`dkms status\` lists no GreenBoost"
  return 1
}
