package configs

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestDecodeDirStrictAndNamesTheFile(t *testing.T) {
	type entry struct {
		Name string `yaml:"name"`
	}
	fsys := fstest.MapFS{
		"d/a.yaml":   {Data: []byte("name: a\n")},
		"d/b.yaml":   {Data: []byte("name: b\n")},
		"d/note.txt": {Data: []byte("not yaml")},
	}
	var got []string
	if err := DecodeDir(fsys, "d", func(p string, e *entry) error { got = append(got, p+"="+e.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "d/a.yaml=a,d/b.yaml=b" {
		t.Fatalf("decoded %v", got)
	}
	fsys["d/c.yaml"] = &fstest.MapFile{Data: []byte("name: c\nnmae: typo\n")}
	err := DecodeDir(fsys, "d", func(string, *entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "d/c.yaml") || !strings.Contains(err.Error(), "nmae") {
		t.Fatalf("unknown field: err = %v, want it to name the file and the field", err)
	}
	// The embedded catalogs decode.
	n := 0
	if err := DecodeDir(FS, "boards", func(string, *map[string]any) error { n++; return nil }); err != nil || n < 7 {
		t.Fatalf("boards: %d files, %v", n, err)
	}
}
