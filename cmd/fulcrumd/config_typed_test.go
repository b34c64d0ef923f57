package main

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/spf13/viper"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
)

// configs/fulcrum.yaml, decoded on its own (no defaults registered), is exactly the
// typed default configuration, and loading it changes nothing against loading no file.
func TestShippedFileDecodesToDefaults(t *testing.T) {
	v := viper.New()
	v.SetConfigFile("../../configs/fulcrum.yaml")
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	var got fileConfig
	if err := v.UnmarshalExact(&got, decodeHooks()); err != nil {
		t.Fatal(err)
	}
	if want := defaultFileConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("configs/fulcrum.yaml decodes to\n%+v\nthe defaults are\n%+v", got, want)
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

// Every key with an opt tag round-trips: the defaults read back from daemon.DefaultOptions
// give DefaultOptions' values again, so no default is written twice.
func TestDefaultsComeFromThePackages(t *testing.T) {
	o := defaultFileConfig().toOptions()
	d := daemon.DefaultOptions()
	ov, dv := reflect.ValueOf(o), reflect.ValueOf(d)
	for _, k := range keys() {
		if k.opt == "" {
			continue
		}
		if got, want := optField(ov, k.opt).Interface(), optField(dv, k.opt).Interface(); fmt.Sprint(got) != fmt.Sprint(want) { // nil and empty lists alike
			t.Errorf("%s (%s): default %v, package default %v", k.name, k.opt, got, want)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("daemon.DefaultOptions does not validate: %v", err)
	}
}
