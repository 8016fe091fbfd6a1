# Sourced by tests/deb/root-suite.sh (root, check, in_root, out, version): greenboost-dkms's
# maintainer scripts in the root, where the package is installed with --force-depends
# (its build dependencies, a toolchain of ~1 GB, are not in the root: the module's real
# DKMS build is tests/deb/dkms-build.sh's, on the host) and with stand-ins, on tmpfs
# mounts that leave the root's files alone:
#   /usr/local/sbin/dkms   logs each call, keeps the registrations (add/remove/status)
#   /usr/local/sbin/uname  says the running kernel is Debian 12's stock one
#   /boot/config-KREL      that kernel's configuration: modules, no Rust
# so postinst meets a stock kernel whose linux-source is not installed: it must register
# the module, say what to install, and succeed without building; prerm must unregister.

krel=6.12.118+deb12-amd64
mount -t tmpfs -o mode=0755 sbin "$root/usr/local/sbin"
mount -t tmpfs -o mode=0755 boot "$root/boot"
printf 'CONFIG_MODULES=y\nCONFIG_MODVERSIONS=y\n' > "$root/boot/config-$krel"
cat > "$root/usr/local/sbin/dkms" <<'EOF'
#!/bin/sh
echo "$*" >> /tmp/dkms.calls
touch /tmp/dkms.registered
case $1 in
  add) echo "$3/$5" >> /tmp/dkms.registered ;;
  remove) : > /tmp/dkms.registered ;;
  status) sed 's/$/: added/' /tmp/dkms.registered ;;
esac
EOF
printf '#!/bin/sh\n[ "$1" = -r ] && { echo %s; exit 0; }\nexec /usr/bin/uname "$@"\n' "$krel" > "$root/usr/local/sbin/uname"
chmod 0755 "$root/usr/local/sbin/dkms" "$root/usr/local/sbin/uname"

check "dpkg -i greenboost-dkms (dependencies forced) succeeds without the kernel's source" \
  in_root dpkg -i --force-depends "/mnt/debs/greenboost-dkms_${version}_all.deb"
cp "$out" "$root/tmp/dkms-install.out"
sed 's/^/     | /' "$root/tmp/dkms-install.out" | grep 'greenboost-dkms:'
check "its postinst names the missing linux-source-6.12 and how to build once it is there" bash -c "
  grep -q 'linux-source-6.12 is not installed: apt-get install linux-source-6.12' '$root/tmp/dkms-install.out' &&
  grep -q 'sudo dkms autoinstall -k $krel' '$root/tmp/dkms-install.out'"
check "postinst registered greenboost/$version with DKMS and built nothing" bash -c "
  grep -qx 'add -m greenboost -v $version' '$root/tmp/dkms.calls' && ! grep -q '^build\|^install' '$root/tmp/dkms.calls'"
check "the module's source is in /usr/src/greenboost-$version with its dkms.conf" bash -c "
  grep -qx 'PACKAGE_VERSION=\"$version\"' '$root/usr/src/greenboost-$version/dkms.conf' &&
  [ -x '$root/usr/src/greenboost-$version/packaging/dkms/dkms-build.sh' ]"
check "no boot-time load of a module that is not built" test ! -e "$root/etc/modules-load.d/greenboost.conf"
check "dpkg --purge greenboost-dkms succeeds" in_root dpkg --purge greenboost-dkms
check "its prerm unregistered the module (dkms remove --all)" bash -c "
  grep -qx 'remove -m greenboost -v $version --all' '$root/tmp/dkms.calls' && [ ! -s '$root/tmp/dkms.registered' ]"
check "the module's source tree is gone" test ! -e "$root/usr/src/greenboost-$version"
umount "$root/usr/local/sbin" "$root/boot"
