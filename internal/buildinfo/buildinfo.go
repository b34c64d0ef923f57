// Package buildinfo says which version of Fulcrum a binary is.
package buildinfo

import "runtime/debug"

// version is stamped at link time by make build and make package
// (-ldflags "-X github.com/fulcrum-edge/fulcrum/internal/buildinfo.version=…"): the only
// way to give a binary its version, so a package variable, never written at run time.
var version string

// Version is the stamped version, else the main module's version from the build info
// (set by go install of a tagged module), else "(devel)".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "(devel)"
}
