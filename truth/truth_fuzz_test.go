package truth

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// FuzzRead: any bytes give a Table or an error, never a panic; a table that reads back
// writes and reads again to the same rows.
func FuzzRead(f *testing.F) {
	hdr := strings.Join(Header(), ",")
	f.Add([]byte(hdr + "\n"))
	f.Add([]byte(""))
	f.Add([]byte("a,b,c\n1,2,3\n"))
	f.Add([]byte(hdr + "\n" + strings.Repeat("1,", len(Header())-1) + "1\n"))
	f.Add([]byte(hdr + "\n" + strings.Repeat("x,", len(Header())-1) + "NaN\n"))
	var buf bytes.Buffer
	if err := Write(&buf, seedRows()); err == nil {
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := Write(&out, tab.Rows); err != nil {
			t.Fatalf("a table Read accepted does not Write: %v", err)
		}
		again, err := Read(&out)
		if err != nil {
			t.Fatalf("re-reading a written table: %v\n%s", err, out.String())
		}
		if len(again.Rows) != len(tab.Rows) {
			t.Fatalf("round trip: %d rows became %d", len(tab.Rows), len(again.Rows))
		}
		for i := range tab.Rows {
			if again.Rows[i].Key() != tab.Rows[i].Key() {
				t.Fatalf("round trip row %d: key %v became %v", i, tab.Rows[i].Key(), again.Rows[i].Key())
			}
		}
	})
}

func seedRows() []Row {
	return []Row{
		{"resnet18", Train, powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}, 32, 0, 101.3456789, 49876.25},
		{"resnet18", Train, powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}, 32, 8, 30.125, 48000.5},
		{"mobilenetv3", Infer, powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}, 8, 0, 12.5, 14000},
	}
}
