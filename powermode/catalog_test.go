package powermode_test

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestCatalogLoadsAGXOrin(t *testing.T) {
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Board("agx-orin-64gb")
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Space()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Size(), 12*29*11*4; got != want {
		t.Errorf("space size = %d, want %d", got, want)
	}
	maxn := b.PresetMode(b.NVP.Presets[0])
	if want := (powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}); maxn != want {
		t.Errorf("MAXN = %v, want %v", maxn, want)
	}
	if _, err := c.Board("nope"); err == nil {
		t.Error("unknown board: want error")
	}
	if m, ok := c.ByModule("p3701-0005"); !ok || m.Name != "agx-orin-64gb" {
		t.Errorf("ByModule(p3701-0005) = %v, %v", m, ok)
	}
}
