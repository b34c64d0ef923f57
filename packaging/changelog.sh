#!/bin/sh
# Writes the package's Debian changelog (usr/share/doc/fulcrum/changelog.gz) to stdout,
# uncompressed: one entry for the version being built, dated by the commit it is built
# from (SOURCE_DATE_EPOCH), so that the same commit gives the same file. Fulcrum is
# packaged by its own authors (a native package: the version has no Debian revision), so
# Debian wants the file called changelog.gz, not changelog.Debian.gz.
# Usage: packaging/changelog.sh VERSION COMMIT
set -eu
version=$1
commit=${2:-unknown}
epoch=${SOURCE_DATE_EPOCH:-$(date +%s)}
date=$(LC_ALL=C date -u -R -d "@$epoch")
cat <<EOT
fulcrum ($version) unstable; urgency=medium

  * Built from commit $commit. What changed is in the project's history
    (git log) and its docs: /usr/share/doc/fulcrum/README.md.

 -- Fulcrum maintainers <fulcrum@fulcrum-edge.invalid>  $date
EOT
