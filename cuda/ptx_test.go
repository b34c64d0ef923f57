package cuda

import (
	"slices"
	"strings"
	"testing"
)

func TestEmbeddedPTX(t *testing.T) {
	if err := CheckPTX(PTX); err != nil {
		t.Fatal(err)
	}
	if got := PTXEntries(PTX); !slices.Equal(got, []string{"fma_burn", "triad"}) {
		t.Fatalf("entries %v", got)
	}
	// sm_50 and ISA 6.0: old enough for every GPU the driver can JIT for (Maxwell on,
	// Orin sm_87 and Hopper sm_90 included).
	if !strings.Contains(PTX, ".version 6.0\n") || !strings.Contains(PTX, ".target sm_50\n") {
		t.Fatal("PTX header is not .version 6.0 / .target sm_50")
	}
}

func TestCheckPTXCatchesMistakes(t *testing.T) {
	for name, mutate := range map[string]func(string) string{
		"no version":        func(s string) string { return strings.Replace(s, ".version 6.0", "", 1) },
		"no target":         func(s string) string { return strings.Replace(s, ".target sm_50", "", 1) },
		"unbalanced":        func(s string) string { return strings.Replace(s, "\tret;\n}", "\tret;\n", 1) },
		"renamed entry":     func(s string) string { return strings.Replace(s, ".entry triad(", ".entry triad2(", 1) },
		"undeclared reg":    func(s string) string { return strings.Replace(s, "%f11, %f1, %f5", "%f12, %f1, %f5", 1) },
		"register too high": func(s string) string { return strings.Replace(s, ".reg .b64 \t%rd<10>", ".reg .b64 \t%rd<7>", 1) },
	} {
		bad := mutate(PTX)
		if bad == PTX {
			t.Fatalf("%s: mutation did not apply", name)
		}
		if err := CheckPTX(bad); err == nil {
			t.Errorf("%s: CheckPTX accepted it", name)
		}
	}
}

func TestParseKernel(t *testing.T) {
	for _, s := range []string{"compute", "memory"} {
		if k, err := ParseKernel(s); err != nil || string(k) != s {
			t.Fatalf("%s: %v %v", s, k, err)
		}
	}
	if _, err := ParseKernel("tensor"); err == nil {
		t.Fatal("tensor accepted")
	}
}
