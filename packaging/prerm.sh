#!/bin/sh
# fulcrum prerm: on removal stop fulcrumd (which restores the board's original power
# state) and disable it. Upgrades keep it running; postinst restarts it.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop fulcrumd.service || true
	systemctl disable fulcrumd.service >/dev/null 2>&1 || true
fi
exit 0
