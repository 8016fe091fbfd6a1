# shellcheck shell=bash
# Sourced by scripts/uninstall.sh, and copied into the Debian package's postrm by
# packaging/deb/build.sh: what GreenBoost's tools leave at run time, outside any file
# list, removed the same way by `make uninstall` and by `apt purge greenboost`.
# Needs from the caller: DESTDIR (empty for the system), say, warn, and staged (true
# when DESTDIR is a stage: then nothing is asked of the system, no swapoff).

# remove_recorded_swapfiles: the swap files `greenboost swap add` made, which it
# records in /var/lib/greenboost/swapfiles (cli/src/swap/record.rs: a comment, then one
# absolute path a line). Each active one is turned off with swapoff, then deleted; a
# file whose swapoff fails is kept, with its record.
remove_recorded_swapfiles() {
  local state_dir=/var/lib/greenboost swapfile kept=()
  local swap_record=$state_dir/swapfiles
  [ -f "$DESTDIR$swap_record" ] || return 0
  while IFS= read -r swapfile; do
    case $swapfile in /*) ;; *) continue ;; esac
    if ! staged && swap_active "$swapfile" && ! swapoff "$swapfile"; then
      warn "swapoff $swapfile failed (it needs free RAM for the pages in it): kept it; free memory, then \`sudo swapoff '$swapfile' && sudo rm '$swapfile'\`"
      kept+=("$swapfile")
    elif [ -L "$DESTDIR$swapfile" ] || { [ -e "$DESTDIR$swapfile" ] && [ ! -f "$DESTDIR$swapfile" ]; }; then
      warn "$swapfile is not a regular file any more: not removing it"
    elif [ -e "$DESTDIR$swapfile" ]; then
      rm -f "$DESTDIR$swapfile"
      say "removed the swap file $swapfile"
    fi
  done < <(grep -v '^#' "$DESTDIR$swap_record")
  if [ ${#kept[@]} -eq 0 ]; then
    rm -f "$DESTDIR$swap_record"
    rmdir "$DESTDIR$state_dir" 2>/dev/null || true
  else
    { grep '^#' "$DESTDIR$swap_record" || true; printf '%s\n' "${kept[@]}"; } > "$DESTDIR$swap_record.new"
    mv "$DESTDIR$swap_record.new" "$DESTDIR$swap_record"
  fi
}

# /proc/swaps escapes space, tab and backslash as octal; compare in that form.
swap_active() {
  local escaped
  escaped=$(printf '%s' "$1" | sed 's/\\/\\134/g; s/ /\\040/g; s/\t/\\011/g')
  awk 'NR > 1 { print $1 }' /proc/swaps 2>/dev/null | grep -qxF -- "$escaped"
}

# remove_shm_leftovers: live tiering's lock files (shim/src/engine/tier_lock.rs) and the
# records of processes killed before they could remove their own
# (policy/src/published.rs). A lock a process holds now, and the record of a process
# still running, stay: they are in use.
remove_shm_leftovers() {
  local shm=$DESTDIR/dev/shm lock published pid
  for lock in "$shm"/greenboost-tier.lock "$shm"/greenboost-tier.*.lock; do
    [ -f "$lock" ] || continue
    if ! command -v flock >/dev/null; then
      warn "kept ${lock#"$DESTDIR"}: flock (util-linux) is missing, so whether a process holds it cannot be told"
    elif flock -n -x "$lock" rm -f "$lock"; then
      say "removed ${lock#"$DESTDIR"}"
    else
      warn "kept ${lock#"$DESTDIR"}: a process under the shim holds it; remove it once that process ends"
    fi
  done
  for published in "$shm"/greenboost-shim.*; do
    pid=${published##*.}
    case $pid in ''|*[!0-9]*) continue ;; esac
    if [ -f "$published" ] && [ ! -d "/proc/$pid" ]; then
      rm -f "$published"
      say "removed ${published#"$DESTDIR"} (process $pid has ended)"
    fi
  done
}
