#!/bin/sh
# fulcrum postinst: create the fulcrum group and /var/lib/fulcrum, make systemd read the
# unit, and restart a running fulcrumd on upgrade. The service is not enabled or started
# on first install: set the budgets in /etc/fulcrum/fulcrum.yaml first (docs/install.md).
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers fulcrum.conf
elif ! getent group fulcrum >/dev/null 2>&1; then
	# No systemd (a container image): the same group by hand.
	groupadd --system fulcrum 2>/dev/null || addgroup --system fulcrum
fi
if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create fulcrum.conf
else
	install -d -m 0750 -o root -g fulcrum /var/lib/fulcrum
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	# $2 is the previously configured version on an upgrade.
	if [ "$1" = configure ] && [ -n "$2" ]; then
		systemctl try-restart fulcrumd.service || true
	fi
fi
exit 0
