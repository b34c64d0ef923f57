// Package powermode holds the vocabulary every other package shares: a power mode, the
// space of modes a board allows, the board catalog, and the Backend interface through
// which a board (real or simulated) is read and driven.
package powermode

import "github.com/fulcrum-edge/fulcrum/powermode/knobs"

// Mode is one power mode: how many CPU cores are online and the pinned CPU, GPU and
// memory (EMC) frequencies (knobs.Mode, a leaf the control API's wire types share).
type Mode = knobs.Mode

// ParseMode parses the form written by Mode.String.
func ParseMode(s string) (Mode, error) { return knobs.ParseMode(s) }
