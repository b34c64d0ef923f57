// Package configs embeds the board and workload catalogs so the binaries carry them;
// a file of the same name under a directory given on the command line overrides them.
package configs

import "embed"

// FS holds boards/*.yaml and workloads/*.yaml. It is read-only.
//
//go:embed boards/*.yaml workloads/*.yaml
var FS embed.FS
