#!/bin/sh
# fulcrum prerm: on removal stop fulcrumd (which restores the board's original power
# state). Upgrades keep it running; postinst restarts it. deb-systemd-invoke where
# init-system-helpers is installed (it honours policy-rc.d), systemctl otherwise.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	if command -v deb-systemd-invoke >/dev/null 2>&1; then
		deb-systemd-invoke stop fulcrumd.service >/dev/null || true
	else
		systemctl stop fulcrumd.service || true
	fi
fi
exit 0
