# Sourced by tests/deb/run.sh (check, work, version, the extracted greenboost-dkms in
# $work/x/dkms): the packaged module built by DKMS for Debian 12's stock kernel and
# loaded in a QEMU guest booting that kernel.
#
# What is exercised, and what is not. The guest is a busybox initramfs, where neither
# dkms nor a compiler runs, so DKMS builds on the host, as it would on the machine the
# package is installed on, from the package's own files: the real dkms, `dkms add` of
# the package's /usr/src/greenboost-VERSION and `dkms build -k KREL`, which runs the
# package's dkms.conf MAKE (packaging/dkms/dkms-build.sh) in DKMS's copy of that tree.
# The differences from an installed package: private DKMS trees (--dkmstree,
# --sourcetree: nothing under /var/lib/dkms or /usr/src of this machine), the stock
# kernel's headers from scripts/fetch-debian-kernel.sh's cache (--kernelsourcedir)
# instead of an installed linux-headers package, the build cache of the other suites
# ($GB_CACHE) instead of /var/cache/greenboost (its private kernel tree is the one
# `make kmod-test` prepared: rebuilding it would take minutes), and no `dkms install`
# (it would run depmod for a kernel this machine does not have): the guest gets the
# built .ko. Then the stock kernel itself, unmodified, boots in QEMU and loads it
# (tests/deb/guest-init).

krel=$GB_STOCK_KREL
dkms_bin=$(command -v dkms || true)
if [ -z "$dkms_bin" ]; then
  check "dkms is installed here (scripts/install-deps.sh installs it)" false
  return 0
fi
image_root=$(scripts/fetch-debian-kernel.sh "$krel") \
  || { check "the stock kernel $krel is fetched (scripts/fetch-debian-kernel.sh)" false; return 0; }
headers=$image_root/usr/src/linux-headers-$krel
dkms_tree=$work/dkms-tree
mkdir -p "$dkms_tree" "$work/dkms-install"
dkms_args=(--dkmstree "$dkms_tree" --sourcetree "$work/x/dkms/usr/src" --installtree "$work/dkms-install")
check "dkms add: the package's /usr/src/greenboost-$version" "$dkms_bin" add greenboost/"$version" "${dkms_args[@]}"
t_build=$(date +%s)
check "dkms build -k $krel: the package's dkms.conf MAKE builds greenboost.ko" \
  env GREENBOOST_CACHE="$GB_CACHE" "$dkms_bin" build greenboost/"$version" -k "$krel" \
    --kernelsourcedir "$headers" "${dkms_args[@]}"
echo "     (dkms build: $(( $(date +%s) - t_build )) s)"
ko=$(find "$dkms_tree/greenboost/$version/$krel" -name 'greenboost.ko*' 2>/dev/null | head -1)
case $ko in
  *.xz) xz -dc "$ko" > "$work/greenboost.ko" ;;
  *.zst) zstd -qdc "$ko" > "$work/greenboost.ko" ;;
  ?*) cp "$ko" "$work/greenboost.ko" ;;
esac
check "the DKMS-built module has vermagic $krel" bash -c \
  "modinfo -F vermagic '$work/greenboost.ko' | grep -q '^$krel '"
[ -s "$work/greenboost.ko" ] || return 0

# --- the stock guest ------------------------------------------------------------------------
initramfs=$work/guest
mkdir -p "$initramfs/bin" "$initramfs/dev" "$initramfs/proc" "$initramfs/sys"
cp /bin/busybox "$initramfs/bin/busybox"
cp tests/deb/guest-init "$initramfs/init"
cp "$work/greenboost.ko" "$initramfs/greenboost.ko"
(cd "$initramfs" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 > "$work/guest.cpio.gz"
log=$work/guest.log
t_boot=$(date +%s)
timeout -k 10 "${GB_QEMU_TIMEOUT:-600}" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1024M \
  -kernel "$image_root/boot/vmlinuz-$krel" -initrd "$work/guest.cpio.gz" \
  -append "console=ttyS0 panic=-1 oops=panic loglevel=6" \
  -nodefaults -no-reboot -display none -serial stdio -monitor none </dev/null 2>&1 \
  | tr -d '\r' > "$log"
echo "     (stock guest: $(( $(date +%s) - t_boot )) s; log kept in build/test-logs/deb-test-guest.log)"
mkdir -p build/test-logs && cp "$log" build/test-logs/deb-test-guest.log
check "the stock guest booted $krel and finished" bash -c "grep -q '^GUEST-BEGIN kernel=$krel' '$log' && grep -q '^GUEST-END' '$log'"
while IFS= read -r line; do
  case $line in
    GUEST-OK\ *) check "guest: ${line#GUEST-OK }" true ;;
    GUEST-FAIL\ *) check "guest: ${line#GUEST-FAIL }" false ;;
  esac
done < "$log"
# The kernel's own complaints: the kmod guests' list (tests/qemu/kernel-complaints.sh).
. tests/qemu/kernel-complaints.sh
check "the guest kernel logged no complaint (Oops, BUG, WARNING, symbol or version errors, ...)" bash -c "
  ! sed -n '/^GUEST-DMESG-BEGIN/,/^GUEST-DMESG-END/p' '$log' | grep -E '$complaint_re' | grep -vE '$benign_re'"
