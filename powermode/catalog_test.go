package powermode_test

import (
	"slices"
	"strings"
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

// Spot checks of values issue 18 corrected against NVIDIA's confs (the YAML's
// nvpmodel.source names each file).
func TestCatalogNVIDIAPresets(t *testing.T) {
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		board     string
		id        int
		want      powermode.PresetSpec
		def       int
		gpuLevel  bool // the GPU cap is one of the board's levels
		sourceEnd string
	}{
		{"orin-nx-16gb", 2, powermode.PresetSpec{ID: 2, Name: "15W", Cores: 4, CPUMaxKHz: 1651200, GPUMaxHz: 612000000, TPCPGMask: 252}, 2, true, "nvpmodel_p3767_0000.conf"},
		{"orin-nx-16gb", 3, powermode.PresetSpec{ID: 3, Name: "25W", Cores: 8, CPUMaxKHz: 1497600, GPUMaxHz: 408000000, TPCPGMask: 240}, 2, true, "nvpmodel_p3767_0000.conf"},
		{"orin-nx-8gb", 2, powermode.PresetSpec{ID: 2, Name: "15W", Cores: 4, CPUMaxKHz: 1420800, GPUMaxHz: 612000000, TPCPGMask: 252}, 2, true, "nvpmodel_p3767_0001.conf"},
		{"orin-nx-8gb", 3, powermode.PresetSpec{ID: 3, Name: "20W", Cores: 6, CPUMaxKHz: 1497600, GPUMaxHz: 408000000, TPCPGMask: 240}, 2, true, "nvpmodel_p3767_0001.conf"},
		{"orin-nx-16gb-super", 4, powermode.PresetSpec{ID: 4, Name: "40W", Cores: 8, CPUMaxKHz: 1497600, GPUMaxHz: 1173000000, TPCPGMask: 240}, 4, true, "nvpmodel_p3767_0000_super.conf"},
		{"orin-nx-8gb-super", 4, powermode.PresetSpec{ID: 4, Name: "40W", Cores: 6, CPUMaxKHz: 1984000, GPUMaxHz: 1173000000, TPCPGMask: 240}, 4, true, "nvpmodel_p3767_0001_super.conf"},
		{"agx-orin-64gb", 1, powermode.PresetSpec{ID: 1, Name: "MODE_15W", Cores: 4, CPUMaxKHz: 1113600, GPUMaxHz: 408000000, EMCMaxHz: 2133000000, TPCPGMask: 248}, 2, true, "nvpmodel_p3701_0000.conf"},
		{"agx-orin-32gb", 0, powermode.PresetSpec{ID: 0, Name: "MAXN", Cores: 8, TPCPGMask: 128}, 2, false, "nvpmodel_p3701_0004.conf"},
		{"orin-nano-8gb", 1, powermode.PresetSpec{ID: 1, Name: "7W", Cores: 4, CPUMaxKHz: 960000, GPUMaxHz: 408000000, EMCMaxHz: 2133000000, TPCPGMask: 252}, 0, true, "nvpmodel_p3767_0003.conf"},
		{"agx-xavier", 5, powermode.PresetSpec{ID: 5, Name: "MODE_30W_4CORE", Cores: 4, CPUMaxKHz: 1780000, GPUMaxHz: 900000000, EMCMaxHz: 1600000000}, 7, false, "nvpmodel_t194.conf"},
	} {
		b, err := c.Board(tc.board)
		if err != nil {
			t.Fatal(err)
		}
		var got *powermode.PresetSpec
		for i := range b.NVP.Presets {
			if b.NVP.Presets[i].ID == tc.id {
				got = &b.NVP.Presets[i]
			}
		}
		if got == nil || *got != tc.want || b.NVP.Default != tc.def || !strings.HasSuffix(b.NVP.Source, "/"+tc.sourceEnd) {
			t.Errorf("%s preset %d = %+v, default %d, source %q; want %+v, %d, %s", tc.board, tc.id, got, b.NVP.Default, b.NVP.Source, tc.want, tc.def, tc.sourceEnd)
		}
		if tc.gpuLevel && !slices.Contains(b.GPU.FreqsHz, tc.want.GPUMaxHz) {
			t.Errorf("%s: GPU cap %d is not a level %v", tc.board, tc.want.GPUMaxHz, b.GPU.FreqsHz)
		}
	}
}
