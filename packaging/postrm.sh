#!/bin/sh
# fulcrum postrm: forget the unit. On remove deb-systemd-helper masks it (the unit file
# is gone; the operator's enable is kept, like the rest of a removed package's
# configuration, and postinst unmasks on reinstall); on purge its state and enable links
# are dropped. Without deb-systemd-helper, remove disables it. /var/lib/fulcrum (the profiles, hours of measurement) is
# kept even on purge; remove it by hand if you no longer want it.
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if command -v deb-systemd-helper >/dev/null 2>&1; then
	case "$1" in
	remove)
		deb-systemd-helper mask fulcrumd.service >/dev/null || true
		;;
	purge)
		deb-systemd-helper purge fulcrumd.service >/dev/null || true
		deb-systemd-helper unmask fulcrumd.service >/dev/null || true
		;;
	esac
elif [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl disable fulcrumd.service >/dev/null 2>&1 || true
fi
if [ "$1" = purge ] && [ -d /var/lib/fulcrum ]; then
	echo "fulcrum: kept /var/lib/fulcrum (profiles); rm -r /var/lib/fulcrum to delete them" >&2
fi
exit 0
