// Package packaging holds the nfpm configuration and maintainer scripts of the fulcrum
// .deb (nfpm.yaml, postinst.sh, prerm.sh, postrm.sh) and the tests that run `make install`
// and `make package` and check what they produce. It has no Go API.
package packaging
