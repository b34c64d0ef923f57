#!/bin/sh
# fulcrum postinst: create the fulcrum group and /var/lib/fulcrum, make systemd read the
# unit, and restart a running fulcrumd on upgrade. The service is not enabled or started
# on first install: set the budgets in /etc/fulcrum/fulcrum.yaml first (docs/install.md).
# Units go through deb-systemd-helper and deb-systemd-invoke (init-system-helpers) as
# dh_installsystemd --no-enable --no-start would write it; where those are absent (a
# minimal image), systemctl directly.
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
case "$1" in
configure | abort-upgrade | abort-deconfigure | abort-remove)
	if command -v deb-systemd-helper >/dev/null 2>&1; then
		# Remove a mask our postrm set on removal, and record the unit's state (not
		# enabled: the operator enables it) so that purge can clean it up.
		deb-systemd-helper unmask fulcrumd.service >/dev/null || true
		deb-systemd-helper update-state fulcrumd.service >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		# $2 is the previously configured version on an upgrade: restart a running
		# fulcrumd onto the new binary (try-restart leaves a stopped one stopped).
		if [ -n "${2:-}" ]; then
			if command -v deb-systemd-invoke >/dev/null 2>&1; then
				deb-systemd-invoke try-restart fulcrumd.service >/dev/null || true
			else
				systemctl try-restart fulcrumd.service || true
			fi
		fi
	fi
	;;
esac
exit 0
