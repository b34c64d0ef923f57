package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

// shown is how fulcrumctl prints a string that came from a worker, the profile store or
// the daemon (workload names, roles, messages, command names): as it is when every rune
// is printable, else Go-quoted ("yolo\x1b]0;pwn\a"), so no control byte (ESC, BEL, CR,
// LF, TAB), bidi override or invalid UTF-8 reaches the operator's terminal and a name
// cannot clear the screen, retitle the window or forge table rows. Quoting the whole
// string also shows the operator the name is not what it looks like. The one helper:
// every human-readable output in this command uses it; --json output is escaped by the
// JSON encoder instead.
func shown(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

func printable(s string) bool {
	for _, r := range s {
		// ' ' is the one space allowed; unicode.IsPrint excludes the other spaces, the
		// controls and the format characters (U+202E and the other bidi controls).
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// shownLines is shown for text whose own line breaks are wanted (fulcrumctl's error
// messages): each line is checked on its own.
func shownLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = shown(l)
	}
	return strings.Join(lines, "\n")
}

// shownBudgets is the budgets line with the streams' workload names made safe.
func shownBudgets(b api.Budgets) string {
	if len(b.Streams) > 0 {
		streams := make([]api.StreamBudgets, len(b.Streams))
		for i, s := range b.Streams {
			s.Workload = shown(s.Workload)
			streams[i] = s
		}
		b.Streams = streams
	}
	return b.String()
}
