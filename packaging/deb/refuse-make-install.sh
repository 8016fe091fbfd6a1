# Both packages' preinst (packaging/deb/build.sh puts this text in each): refuse while
# `make install` (scripts/install.sh) has GreenBoost installed. Both would own the same
# commands, rules, group and DKMS registration, and `make uninstall` would then remove
# what the package installed. make install's manifest is PREFIX/share/greenboost/
# install-manifest (PREFIX /usr/local unless given; /usr or /opt/NAME are the others).
refuse_make_install() {
  for manifest in /usr/local/share/greenboost/install-manifest /usr/share/greenboost/install-manifest \
                  /opt/*/share/greenboost/install-manifest; do
    [ -f "$manifest" ] || continue
    prefix=${manifest%/share/greenboost/install-manifest}
    uninstall="sudo make uninstall"
    [ "$prefix" = /usr/local ] || uninstall="sudo make uninstall PREFIX=$prefix"
    echo "${DPKG_MAINTSCRIPT_PACKAGE:-greenboost}: GreenBoost is installed by \`make install\` (its manifest: $manifest)." >&2
    echo "Remove that install first: \`$uninstall\` in its source tree; then install this package again." >&2
    exit 1
  done
}
case "$1" in install | upgrade) refuse_make_install ;; esac
