package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ReadModels returns the learned models stored in the profile store file at dbPath whose
// key starts with prefix. It reads the store's documented "models" bucket directly,
// read-only under a shared lock, because store.Store lists models only by key
// (GetModel); it waits at most timeout for a writer (fulcrumd) to release the file.
// Call it with the store closed, or opened read-only.
func ReadModels(dbPath, prefix string, timeout time.Duration) (map[string]json.RawMessage, error) {
	db, err := bolt.Open(dbPath, 0o644, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("read models from %s: the file is locked by another process (stop fulcrumd: systemctl stop fulcrumd): %w", dbPath, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read models from %s: %w", dbPath, err)
	}
	defer db.Close()
	out := map[string]json.RawMessage{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("models"))
		if b == nil {
			return nil // a store that predates the models bucket has none
		}
		c := b.Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			if v == nil {
				return fmt.Errorf("models/%s is a bucket, want a JSON value (run fulcrumctl profile check)", k)
			}
			out[string(k)] = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read models from %s: %w", dbPath, err)
	}
	return out, nil
}
