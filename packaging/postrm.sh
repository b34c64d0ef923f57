#!/bin/sh
# fulcrum postrm: forget the unit. /var/lib/fulcrum (the profiles, hours of measurement)
# is kept even on purge; remove it by hand if you no longer want it.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = purge ] && [ -d /var/lib/fulcrum ]; then
	echo "fulcrum: kept /var/lib/fulcrum (profiles); rm -r /var/lib/fulcrum to delete them" >&2
fi
exit 0
