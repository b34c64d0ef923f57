package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

// configs/fulcrum.yaml, decoded on its own (no defaults registered) into a zero config,
// sets every key to the packages' default, and loading it changes nothing against
// loading no file.
func TestShippedFileDecodesToDefaults(t *testing.T) {
	v := viper.New()
	if err := readConfigFile(v, "../../configs/fulcrum.yaml"); err != nil {
		t.Fatal(err)
	}
	var got config
	if errs := decode(v, &got); len(errs) > 0 {
		t.Fatal(errs)
	}
	gv, dv := valuesOf(got), valuesOf(defaultConfig())
	for _, k := range keys() {
		if fmt.Sprint(gv[k.name]) != fmt.Sprint(dv[k.name]) { // nil and empty lists alike
			t.Errorf("%s: configs/fulcrum.yaml decodes to %v, the default is %v", k.name, gv[k.name], dv[k.name])
		}
	}

	withFile := newViper()
	if err := readConfigFile(withFile, "../../configs/fulcrum.yaml"); err != nil {
		t.Fatal(err)
	}
	a, err := settings(withFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := settings(newViper())
	if err != nil {
		t.Fatal(err)
	}
	if describe(a) != describe(b) {
		t.Fatalf("the shipped file changes the settings:\n%s\nwithout it:\n%s", describe(a), describe(b))
	}
}

// The tags are the keys: every duration's key says its unit, no two fields share a key,
// and every moved key names a real field (a typo there would leave a key at its struct's
// place, unknown to the file).
func TestKeysFromTags(t *testing.T) {
	seen := map[string]string{}
	for _, k := range keys() {
		if prev, ok := seen[k.name]; ok {
			t.Errorf("key %s set by both %s and %s", k.name, prev, k.goPath)
		}
		seen[k.name] = k.goPath
		typ := reflect.TypeFor[config]().FieldByIndex(k.index).Type
		isDuration := typ == reflect.TypeFor[time.Duration]()
		if isDuration != (k.unit != 0) {
			t.Errorf("key %s (%s, %v): a time.Duration needs a key ending in _ms or _s, and only it", k.name, k.goPath, typ)
		}
	}
	for _, m := range moved() {
		found := false
		for _, k := range keys() {
			if k.field == m[1] || strings.HasPrefix(k.field, m[1]+".") {
				found = true
			}
		}
		if !found {
			t.Errorf("moved key %s → %s: no field is tagged %s", m[0], m[1], m[1])
		}
	}
	// The keys a few Go fields are reported under (optcheck names the Go field).
	for goPath, want := range map[string]string{
		"Server.Sched.Margin":       "scheduler.margin_ms",
		"Server.Sched.HoldMin":      "worker.hold_min_ms",
		"Server.RuntimeDir":         "runtime_dir",
		"Server.SocketMode":         "worker.socket_mode",
		"Control.Live.MinTime":      "controller.live.min_time_ms",
		"API.SocketMode":            "control.socket_mode",
		"MetricsListen":             "metrics.listen",
		"NVML.LibraryPath":          "nvml.library",
		"Control.Confidence":        "controller.plan_confidence",
		"Server.Sched.RecentWindow": "scheduler.recent_window_s",
	} {
		if got := keyOf(goPath).name; got != want {
			t.Errorf("%s is reported as %s, want %s", goPath, got, want)
		}
	}
}
