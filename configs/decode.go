package configs

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DecodeDir decodes every *.yaml file in dir of fsys into a fresh T, strictly (an unknown
// field is an error, so a typo cannot silently zero a value), and hands each to use with
// its path. Errors name the file.
func DecodeDir[T any](fsys fs.FS, dir string, use func(p string, v *T) error) error {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		p := path.Join(dir, e.Name())
		raw, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		v := new(T)
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("%s: %w (fix the file or remove it)", p, err)
		}
		if err := use(p, v); err != nil {
			return err
		}
	}
	return nil
}
