package faketree

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Layouts: the sysfs layouts of the three L4T generations. They differ in where the GPU
// and the I2C bus sit under /sys/devices and in the nvpmodel EMC cap file.
const (
	LayoutJP4 = "jp4" // L4T R32 (JetPack 4), Xavier
	LayoutJP5 = "jp5" // L4T R35 (JetPack 5)
	LayoutJP6 = "jp6" // L4T R36 (JetPack 6)
)

// canonicalL4T is the release a layout gets when neither Options nor the spec names one.
var canonicalL4T = map[string]string{LayoutJP4: "R32.7.1", LayoutJP5: "R35.4.1", LayoutJP6: "R36.4.3"}

// layoutOfL4T maps an L4T release ("R36.4.3") to its layout.
func layoutOfL4T(l4t string) (string, error) {
	switch {
	case strings.HasPrefix(l4t, "R32."):
		return LayoutJP4, nil
	case strings.HasPrefix(l4t, "R35."):
		return LayoutJP5, nil
	case strings.HasPrefix(l4t, "R36."):
		return LayoutJP6, nil
	}
	return "", fmt.Errorf("L4T release %q: want R32.x.y, R35.x.y or R36.x.y", l4t)
}

// resolveLayout picks the layout and L4T release: both from Options when given, else
// the spec's newest L4T release, else the spec's only GPU layout.
func resolveLayout(spec *powermode.BoardSpec, opts Options) (layout, l4t string, err error) {
	layout, l4t = opts.Layout, opts.L4T
	if l4t != "" {
		fromL4T, err := layoutOfL4T(l4t)
		if err != nil {
			return "", "", err
		}
		if layout != "" && layout != fromL4T {
			return "", "", fmt.Errorf("layout %s does not match L4T %s (which is %s): give one of them, or a matching pair", layout, l4t, fromL4T)
		}
		layout = fromL4T
	}
	if layout == "" {
		for i := len(spec.L4T) - 1; i >= 0 && layout == ""; i-- {
			if lay, err := layoutOfL4T(spec.L4T[i]); err == nil && spec.GPU.Paths[lay] != "" {
				layout = lay
			}
		}
	}
	if layout == "" && len(spec.GPU.Paths) == 1 {
		for k := range spec.GPU.Paths {
			layout = k
		}
	}
	if layout == "" {
		return "", "", fmt.Errorf("board %s: cannot tell the layout: set Options.Layout to one of %s", spec.Name, strings.Join(Layouts(spec), ", "))
	}
	if _, ok := canonicalL4T[layout]; !ok {
		return "", "", fmt.Errorf("layout %q: want jp4, jp5 or jp6", layout)
	}
	if spec.GPU.Paths[layout] == "" {
		return "", "", fmt.Errorf("board %s has no GPU path for layout %s: it supports %s", spec.Name, layout, strings.Join(Layouts(spec), ", "))
	}
	if l4t == "" {
		for i := len(spec.L4T) - 1; i >= 0 && l4t == ""; i-- {
			if lay, err := layoutOfL4T(spec.L4T[i]); err == nil && lay == layout {
				l4t = spec.L4T[i]
			}
		}
	}
	if l4t == "" {
		l4t = canonicalL4T[layout]
	}
	return layout, l4t, nil
}

// Layouts lists the layouts a spec supports (those it has a GPU path for), sorted.
func Layouts(spec *powermode.BoardSpec) []string {
	var out []string
	for k := range spec.GPU.Paths {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// i2cBusDir is the I2C controller's bus directory for a sensor at addr ("1-0040"): the
// bus number is addr's prefix. Bus 1 is c240000.i2c (the Orins, AGX Xavier), bus 7
// c250000.i2c (Xavier NX: NVIDIA's nvpmodel_t194_p3668.conf names
// c250000.i2c/i2c-7/7-0040). JetPack 6 device trees put the controllers under bus@0
// (assumption for the I2C bus, by analogy with the GPU's move to /sys/devices/platform/bus@0 in R36).
func i2cBusDir(layout, addr string) string {
	bus, _, _ := strings.Cut(addr, "-")
	ctrl := "c240000.i2c"
	if bus == "7" {
		ctrl = "c250000.i2c"
	}
	dir := "/sys/devices/" + ctrl + "/i2c-" + bus
	if layout == LayoutJP6 {
		dir = "/sys/devices/platform/bus@0/" + ctrl + "/i2c-" + bus
	}
	return dir
}

// emcCapPath is the file nvpmodel writes its EMC cap to.
func emcCapPath(layout string) string {
	if layout == LayoutJP6 {
		return "/sys/kernel/nvpmodel_clk_cap/emc"
	}
	return "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap"
}

// ofNodeName is the device-tree node name of a platform device called
// "<unit-address>.<node>", e.g. "17000000.gpu" -> "gpu".
func ofNodeName(devPath string) string {
	base := path.Base(devPath)
	if i := strings.IndexByte(base, '.'); i >= 0 {
		return base[i+1:]
	}
	return base
}

// ofNodeDir is where /sys/firmware/devicetree/base holds the node of a device:
// "<node>@<unit-address>", under bus@0 on JetPack 6.
func ofNodeDir(layout, devPath string) string {
	base := path.Base(devPath)
	unit, node, _ := strings.Cut(base, ".")
	dir := "/sys/firmware/devicetree/base"
	if layout == LayoutJP6 {
		dir += "/bus@0"
	}
	return dir + "/" + node + "@" + unit
}

// platformDir is where a platform device at "<unit>.<node>" lives in a layout.
func platformDir(layout, base string) string {
	if layout == LayoutJP6 {
		return "/sys/devices/platform/bus@0/" + base
	}
	return "/sys/devices/" + base
}

// confName is the file under /etc/nvpmodel that /etc/nvpmodel.conf points to: the
// name of NVIDIA's conf the catalog presets come from (nvpmodel.source), so p3701-0005
// links nvpmodel_p3701_0000.conf and a super entry nvpmodel_p3767_0000_super.conf as
// on a board; without a source, nvpmodel_<first module>.conf.
func confName(spec *powermode.BoardSpec) string {
	if src := strings.Fields(spec.NVP.Source); len(src) > 0 {
		if f := path.Base(src[len(src)-1]); strings.HasSuffix(f, ".conf") {
			return f
		}
	}
	if spec.SoC == "tegra194" {
		return "nvpmodel_t194.conf"
	}
	mod := "unknown"
	if len(spec.Modules) > 0 {
		mod = spec.Modules[0]
	}
	return "nvpmodel_" + strings.ReplaceAll(mod, "-", "_") + ".conf"
}
