package nvpmodel_test

import (
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
)

// FuzzParse: any bytes give a Conf or an error, never a panic; a parsed Conf's
// lookups by its own names succeed.
func FuzzParse(f *testing.F) {
	f.Add([]byte(agxOrinConf))
	for _, s := range []string{
		"", "< PARAM TYPE=FILE NAME=CPU_ONLINE >\nCORE_0 /sys/x\n",
		"< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n",
		"< PM_CONFIG DEFAULT=0 >\n", "< PM_CONFIG DEFAULT=x >\n", "< POWER_MODEL ID= NAME= >\n",
		"<<<>>>\n", "< PARAM TYPE=CLOCK NAME=GPU >\nFREQ_TABLE /x\nMAX_FREQ /y\n< POWER_MODEL ID=1 NAME=A >\nGPU MAX_FREQ -1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := nvpmodel.Parse(strings.NewReader(string(b)))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if c == nil {
			t.Fatal("nil Conf without an error")
		}
		for _, p := range c.Params {
			if got, ok := c.Param(p.Name); !ok || got.Name != p.Name {
				t.Fatalf("Param(%q) not found in its own Conf", p.Name)
			}
		}
	})
}
