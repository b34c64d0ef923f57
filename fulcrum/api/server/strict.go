package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// checkKeys walks a JSON body against the Go type it is decoded into and rejects what
// encoding/json lets through: a key given twice in one object (the last one would win
// silently) and a key that matches a field only case-insensitively (latency_MS for
// latency_ms). Unknown keys are named too. The error is a 400 naming the key's path.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := walkValue(dec, t, "")
	if err == nil || errors.Is(err, io.EOF) {
		return nil // a syntax error is reported by the decoding that follows
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	return nil
}

// jsonFields are the JSON names of a struct's fields (embedded structs flattened) and
// their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.Contains(tag, ",") {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		switch {
		case t != nil && t.Kind() == reflect.Struct:
			fields = jsonFields(t)
		case t != nil && t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			kpath := key
			if path != "" {
				kpath = path + "." + key
			}
			if seen[key] {
				return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, kpath, "key %q appears twice; give each key once", kpath)
			}
			seen[key] = true
			vt := elem
			if fields != nil {
				ft, ok := fields[key]
				if !ok {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, kpath, "key %q: keys are case-sensitive; did you mean %q? (see docs/api.md)", kpath, name)
						}
					}
					return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, kpath, "unknown field %q (see docs/api.md for the fields)", kpath)
				}
				vt = ft
			}
			if err := walkValue(dec, vt, kpath); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}
