package powermode_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
)

// writeTree writes files (in-board path -> content) under a new root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	r36 = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\n"
	r35 = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n"
	r32 = "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref, EABI: aarch64, DATE: Sat Feb 19 17:05:08 UTC 2022\n"
)

func dt(model string, compat ...string) map[string]string {
	return map[string]string{
		"/proc/device-tree/model":      model + "\x00",
		"/proc/device-tree/compatible": strings.Join(compat, "\x00") + "\x00",
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestDetect(t *testing.T) {
	cat := testboard.Catalog(t)
	superConf := "< POWER_MODEL ID=0 NAME=15W >\n< POWER_MODEL ID=1 NAME=25W >\n< POWER_MODEL ID=2 NAME=MAXN_SUPER >\n< POWER_MODEL ID=3 NAME=7W >\n"
	plainConf := "< POWER_MODEL ID=0 NAME=15W >\n< POWER_MODEL ID=1 NAME=7W >\n"
	nxSuperConf := "< POWER_MODEL ID=0 NAME=MAXN_SUPER >\n< POWER_MODEL ID=1 NAME=10W >\n< POWER_MODEL ID=2 NAME=15W >\n< POWER_MODEL ID=3 NAME=25W >\n< POWER_MODEL ID=4 NAME=40W >\n"
	nxConf := "< POWER_MODEL ID=0 NAME=MAXN >\n< POWER_MODEL ID=1 NAME=10W >\n< POWER_MODEL ID=2 NAME=15W >\n< POWER_MODEL ID=3 NAME=25W >\n"
	nano4Conf := "< POWER_MODEL ID=0 NAME=10W >\n< POWER_MODEL ID=1 NAME=7W_AI >\n< POWER_MODEL ID=2 NAME=7W_CPU >\n"
	nano4SuperConf := "< POWER_MODEL ID=0 NAME=10W >\n< POWER_MODEL ID=1 NAME=25W >\n< POWER_MODEL ID=2 NAME=MAXN_SUPER >\n"
	nxDT := func() map[string]string {
		return dt("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "nvidia,p3768-0000+p3767-0000", "nvidia,p3767-0000", "nvidia,tegra234")
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  powermode.BoardInfo
	}{
		{"agx orin 64gb jp6", with(dt("NVIDIA Jetson AGX Orin Developer Kit", "nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234"), "/etc/nv_tegra_release", r36),
			powermode.BoardInfo{Name: "agx-orin-64gb", Model: "NVIDIA Jetson AGX Orin Developer Kit", Module: "p3701-0005", SoC: "tegra234", L4T: "R36.4.3"}},
		{"agx orin p3701-0000 jp5", with(dt("NVIDIA Jetson AGX Orin Developer Kit", "nvidia,p3737-0000+p3701-0000", "nvidia,p3701-0000", "nvidia,tegra234"), "/etc/nv_tegra_release", r35),
			powermode.BoardInfo{Name: "agx-orin-64gb", Model: "NVIDIA Jetson AGX Orin Developer Kit", Module: "p3701-0000", SoC: "tegra234", L4T: "R35.4.1"}},
		{"agx orin 32gb, no release file", dt("NVIDIA Jetson AGX Orin", "nvidia,p3737-0000+p3701-0004", "nvidia,p3701-0004", "nvidia,tegra234"),
			powermode.BoardInfo{Name: "agx-orin-32gb", Model: "NVIDIA Jetson AGX Orin", Module: "p3701-0004", SoC: "tegra234"}},
		{"orin nx 16gb", with(dt("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "nvidia,p3768-0000+p3767-0000", "nvidia,p3767-0000", "nvidia,tegra234"), "/etc/nv_tegra_release", r35),
			powermode.BoardInfo{Name: "orin-nx-16gb", Model: "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", Module: "p3767-0000", SoC: "tegra234", L4T: "R35.4.1"}},
		{"orin nx 16gb jp6.2, super names", with(nxDT(), "/etc/nv_tegra_release", r36, "/etc/nvpmodel.conf", nxSuperConf),
			powermode.BoardInfo{Name: "orin-nx-16gb-super", Model: "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", Module: "p3767-0000", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nx 16gb jp6, plain conf", with(nxDT(), "/etc/nv_tegra_release", r36, "/etc/nvpmodel.conf", nxConf),
			powermode.BoardInfo{Name: "orin-nx-16gb", Model: "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", Module: "p3767-0000", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nx 16gb jp6, no conf", with(nxDT(), "/etc/nv_tegra_release", r36),
			powermode.BoardInfo{Name: "orin-nx-16gb", Model: "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", Module: "p3767-0000", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nx 8gb on a third-party carrier", dt("Seeed reComputer J4011", "nvidia,p3509-0000+p3767-0001", "nvidia,tegra234"),
			powermode.BoardInfo{Name: "orin-nx-8gb", Model: "Seeed reComputer J4011", Module: "p3767-0001", SoC: "tegra234"}},
		{"orin nano devkit", with(dt("NVIDIA Jetson Orin Nano Developer Kit", "nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"), "/etc/nv_tegra_release", r36, "/etc/nvpmodel.conf", plainConf),
			powermode.BoardInfo{Name: "orin-nano-8gb", Model: "NVIDIA Jetson Orin Nano Developer Kit", Module: "p3767-0005", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nano devkit super (compatible)", with(dt("NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", "nvidia,p3768-0000+p3767-0005-super", "nvidia,p3767-0005", "nvidia,tegra234"), "/etc/nv_tegra_release", r36),
			powermode.BoardInfo{Name: "orin-nano-8gb-super", Model: "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", Module: "p3767-0005", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nano production module, super conf", with(dt("Custom Orin Nano", "nvidia,p3509-0000+p3767-0003", "nvidia,p3767-0003", "nvidia,tegra234"), "/etc/nvpmodel/nvpmodel_p3767_0003_super.conf", superConf),
			powermode.BoardInfo{Name: "orin-nano-8gb-super", Model: "Custom Orin Nano", Module: "p3767-0003", SoC: "tegra234"}},
		{"orin nano production module, plain conf", with(dt("Custom Orin Nano", "nvidia,p3509-0000+p3767-0003", "nvidia,p3767-0003", "nvidia,tegra234"), "/etc/nvpmodel.conf", plainConf),
			powermode.BoardInfo{Name: "orin-nano-8gb", Model: "Custom Orin Nano", Module: "p3767-0003", SoC: "tegra234"}},
		// A JetPack 6.2 devkit whose device tree does not say "-super": the conf decides.
		{"orin nano devkit, plain compatible, super names", with(dt("NVIDIA Jetson Orin Nano Developer Kit", "nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"), "/etc/nv_tegra_release", r36, "/etc/nvpmodel.conf", superConf),
			powermode.BoardInfo{Name: "orin-nano-8gb-super", Model: "NVIDIA Jetson Orin Nano Developer Kit", Module: "p3767-0005", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nano 4gb, plain conf", with(dt("NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", "nvidia,p3768-0000+p3767-0004", "nvidia,p3767-0004", "nvidia,tegra234"), "/etc/nv_tegra_release", r36, "/etc/nvpmodel.conf", nano4Conf),
			powermode.BoardInfo{Name: "orin-nano-4gb", Model: "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", Module: "p3767-0004", SoC: "tegra234", L4T: "R36.4.3"}},
		{"orin nano 4gb, plain compatible, super names", with(dt("NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", "nvidia,p3768-0000+p3767-0004", "nvidia,p3767-0004", "nvidia,tegra234"), "/etc/nv_tegra_release", r36, "/etc/nvpmodel.conf", nano4SuperConf),
			powermode.BoardInfo{Name: "orin-nano-4gb-super", Model: "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", Module: "p3767-0004", SoC: "tegra234", L4T: "R36.4.3"}},
		{"xavier nx emmc jp5", with(dt("NVIDIA Jetson Xavier NX Developer Kit (eMMC)", "nvidia,p3509-0000+p3668-0001", "nvidia,tegra194"), "/etc/nv_tegra_release", r35),
			powermode.BoardInfo{Name: "xavier-nx", Model: "NVIDIA Jetson Xavier NX Developer Kit (eMMC)", Module: "p3668-0001", SoC: "tegra194", L4T: "R35.4.1"}},
		{"agx xavier jp4, model without NUL", with(map[string]string{"/proc/device-tree/model": "Jetson-AGX", "/proc/device-tree/compatible": "nvidia,p2972-0000\x00nvidia,galen\x00nvidia,tegra194\x00"}, "/etc/nv_tegra_release", r32),
			powermode.BoardInfo{Name: "agx-xavier", Model: "Jetson-AGX", Module: "p2972-0000", SoC: "tegra194", L4T: "R32.7.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := writeTree(t, tc.files)
			if strings.Contains(tc.name, "super conf") {
				// The conf as a real board has it: an absolute link, resolved under root.
				if err := os.Symlink("/etc/nvpmodel/nvpmodel_p3767_0003_super.conf", filepath.Join(root, "etc/nvpmodel.conf")); err != nil {
					t.Fatal(err)
				}
			}
			spec, info, err := powermode.Detect(root, cat)
			if err != nil {
				t.Fatal(err)
			}
			if info != tc.want || spec.Name != tc.want.Name {
				t.Errorf("got %+v (spec %s), want %+v", info, spec.Name, tc.want)
			}
		})
	}
}

func TestDetectErrors(t *testing.T) {
	cat := testboard.Catalog(t)
	for _, tc := range []struct {
		name   string
		files  map[string]string
		is     error
		substr []string
	}{
		{"x86 host", map[string]string{"/etc/hostname": "dev\n"}, powermode.ErrNotJetson,
			[]string{"not a Jetson", "/proc/device-tree/model", "fulcrumctl sim board --dir DIR --board agx-orin-64gb", "--root DIR"}},
		{"raspberry pi", dt("Raspberry Pi 4 Model B Rev 1.4", "raspberrypi,4-model-b", "brcm,bcm2711"), powermode.ErrNotJetson,
			[]string{"not a Jetson", "Raspberry Pi 4 Model B Rev 1.4", "brcm,bcm2711", "fulcrumctl sim board"}},
		{"model but no compatible", map[string]string{"/proc/device-tree/model": "Some board\x00"}, powermode.ErrNotJetson,
			[]string{"Some board"}},
		{"jetson nano (tegra210)", dt("NVIDIA Jetson Nano Developer Kit", "nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano", "nvidia,tegra210"), powermode.ErrUnknownBoard,
			[]string{"p3448-0000", "NVIDIA Jetson Nano Developer Kit", "agx-orin-64gb", "orin-nano-8gb-super", "configs/boards"}},
		{"tx2", dt("quill", "nvidia,p2771-0000", "nvidia,tegra186"), powermode.ErrUnknownBoard,
			[]string{"p2771-0000", "known boards are agx-orin-32gb"}},
		{"bad release", with(dt("NVIDIA Jetson AGX Orin", "nvidia,p3701-0005", "nvidia,tegra234"), "/etc/nv_tegra_release", "R36.4.3\n"), nil,
			[]string{"nv_tegra_release", "want \"# R36 (release)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := powermode.Detect(writeTree(t, tc.files), cat)
			if err == nil {
				t.Fatal("want error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.is)
			}
			for _, s := range tc.substr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestReadL4T(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{r36, "R36.4.3"},
		{r35, "R35.4.1"},
		{r32, "R32.7.1"},
		{"# R36 (release), REVISION: 4, GCID: 1, BOARD: generic\n", "R36.4"},
	} {
		root := writeTree(t, map[string]string{"/etc/nv_tegra_release": tc.content})
		if got, err := powermode.ReadL4T(root); err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.content, got, err, tc.want)
		}
	}
	if _, err := powermode.ReadL4T(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	if _, err := powermode.ReadL4T(writeTree(t, map[string]string{"/etc/nv_tegra_release": ""})); err == nil {
		t.Error("empty file: want error")
	}
}

// Every catalog board's fake tree detects as that board, on every layout.
func TestDetectFaketrees(t *testing.T) {
	cat := testboard.Catalog(t)
	if len(cat.Names()) < 7 {
		t.Errorf("catalog has %d boards (%v), want at least 7", len(cat.Names()), cat.Names())
	}
	for _, name := range cat.Names() {
		spec, _ := cat.Board(name)
		for _, layout := range faketree.Layouts(spec) {
			tr, err := faketree.Build(t.TempDir(), spec, faketree.Options{Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			got, info, err := powermode.Detect(tr.Root(), cat)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, layout, err)
			}
			if got.Name != name || info.L4T != tr.L4T() || info.Model != spec.Model || info.SoC != spec.SoC {
				t.Errorf("%s/%s: detected %+v", name, layout, info)
			}
		}
	}
}
