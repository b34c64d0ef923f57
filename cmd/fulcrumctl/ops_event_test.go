package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

// The events table shows the error an event carries: "gmd search failed; planning from
// what is stored" alone did not say that the board refused mode writes (seen with
// fulcrumd --board nvml, read-only, on an H200).
func TestFormatEventShowsItsError(t *testing.T) {
	data, _ := json.Marshal(map[string]string{"error": "apply mode: nvml: read-only: set nvml.clock_control: true"})
	e := api.Event{Seq: 3, Time: time.Unix(0, 0), Kind: "profile", Message: "gmd search failed; planning from what is stored", Data: data}
	line := formatEvent(e)
	if !strings.Contains(line, "planning from what is stored: apply mode: nvml: read-only") {
		t.Fatalf("event line %q does not carry its error", line)
	}
	e.Data = nil
	if line := formatEvent(e); !strings.HasSuffix(line, "planning from what is stored") {
		t.Fatalf("event without error: %q", line)
	}
}
