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
		{"orin-nano-4gb", 1, powermode.PresetSpec{ID: 1, Name: "7W_AI", Cores: 4, CPUMaxKHz: 806400, GPUMaxHz: 408000000, EMCMaxHz: 2133000000, TPCPGMask: 252}, 0, true, "nvpmodel_p3767_0004.conf"},
		{"orin-nano-4gb", 2, powermode.PresetSpec{ID: 2, Name: "7W_CPU", Cores: 4, CPUMaxKHz: 960000, GPUMaxHz: 306000000, EMCMaxHz: 2133000000, TPCPGMask: 252}, 0, true, "nvpmodel_p3767_0004.conf"},
		{"orin-nano-4gb-super", 1, powermode.PresetSpec{ID: 1, Name: "25W", Cores: 6, CPUMaxKHz: 1728000, GPUMaxHz: 1020000000, EMCMaxHz: 3199000000, TPCPGMask: 252}, 1, true, "nvpmodel_p3767_0004_super.conf"},
		{"xavier-nx", 5, powermode.PresetSpec{ID: 5, Name: "MODE_10W_DESKTOP", Cores: 4, CPUMaxKHz: 1907200, GPUMaxHz: 510000000, EMCMaxHz: 1600000000, TPCPGMask: 1}, 5, true, "nvpmodel_t194_p3668.conf"},
		{"xavier-nx", 8, powermode.PresetSpec{ID: 8, Name: "MODE_20W_6CORE", Cores: 6, CPUMaxKHz: 1420800, GPUMaxHz: 1109250000, EMCMaxHz: 1866000000, TPCPGMask: 1}, 5, true, "nvpmodel_t194_p3668.conf"},
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

// Issue 34: the NX 8GB super table has the levels between its plain 765 MHz cap and the
// super cap that the 16GB super table has; every preset cap of the new entries snaps to
// itself (caps are levels), and the super entries also match the plain carrier string.
func TestCatalogIssue34Entries(t *testing.T) {
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		t.Fatal(err)
	}
	nx8, _ := c.Board("orin-nx-8gb-super")
	nx16, _ := c.Board("orin-nx-16gb-super")
	for _, hz := range nx16.GPU.FreqsHz {
		if hz > 765000000 && !slices.Contains(nx8.GPU.FreqsHz, hz) {
			t.Errorf("orin-nx-8gb-super GPU levels %v lack %d Hz that orin-nx-16gb-super has", nx8.GPU.FreqsHz, hz)
		}
	}
	for _, tc := range []struct{ board, plainCompat string }{
		{"orin-nano-8gb-super", "nvidia,p3768-0000+p3767-0005"},
		{"orin-nano-4gb-super", "nvidia,p3768-0000+p3767-0004"},
		{"orin-nx-8gb-super", "nvidia,p3768-0000+p3767-0001"},
		{"orin-nx-16gb-super", "nvidia,p3768-0000+p3767-0000"},
	} {
		b, err := c.Board(tc.board)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(b.Compatible, tc.plainCompat) || !slices.Contains(b.Compatible, tc.plainCompat+"-super") {
			t.Errorf("%s compatible %v: want both %s and its -super form", tc.board, b.Compatible, tc.plainCompat)
		}
	}
	for _, name := range []string{"orin-nano-4gb", "orin-nano-4gb-super", "xavier-nx"} {
		b, err := c.Board(name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Space()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range b.NVP.Presets {
			if m := b.PresetMode(p); s.Snap(m) != m {
				t.Errorf("%s preset %s: caps %v are not levels (snap %v)", name, p.Name, m, s.Snap(m))
			}
		}
	}
}
