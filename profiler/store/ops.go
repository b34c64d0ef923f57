package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fulcrum-edge/fulcrum/truth"
	bolt "go.etcd.io/bbolt"
)

// PutOption changes what Put does.
type PutOption int

// Overwrite lets Put replace a stored profile. Without it Put never loses a measurement.
const Overwrite PutOption = 1

// Put stores p. It refuses (with an error wrapping ErrExists) to replace a profile already
// stored under p.Key() unless given Overwrite. Times are stored in UTC.
func (s *Store) Put(p Profile, opts ...PutOption) error {
	overwrite := false
	for _, o := range opts {
		overwrite = overwrite || o == Overwrite
	}
	p = p.normalize()
	if err := p.Validate(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	err := s.update(func(tx *bolt.Tx) error {
		_, err := putTx(tx, p, overwrite)
		return err
	})
	if err != nil {
		return fmt.Errorf("store %s: put %s: %w", s.path, p.Key(), err)
	}
	return nil
}

// putTx stores p in tx and reports whether it replaced a profile.
func putTx(tx *bolt.Tx, p Profile, overwrite bool) (replaced bool, err error) {
	raw, err := encodeProfile(p)
	if err != nil {
		return false, err
	}
	b := tx.Bucket(bucketProfiles)
	for _, name := range p.Key().path() {
		if b, err = b.CreateBucketIfNotExists(name); err != nil {
			return false, err
		}
	}
	k := p.Key().key()
	if b.Get(k) != nil {
		if !overwrite {
			return false, fmt.Errorf("%w (delete it first, or overwrite it explicitly)", ErrExists)
		}
		return true, b.Put(k, raw)
	}
	if err := b.Put(k, raw); err != nil {
		return false, err
	}
	return false, addCount(tx, 1)
}

func encodeProfile(p Profile) ([]byte, error) { return json.Marshal(p) }

// decodeProfile is strict: an unknown field means the value was written by something
// else, which Check must report.
func decodeProfile(raw []byte) (Profile, error) {
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("decode profile: %w", err)
	}
	if dec.More() {
		return p, errors.New("decode profile: trailing data after the JSON value")
	}
	return p, nil
}

// modeBucket walks to k's mode bucket, or nil.
func modeBucket(tx *bolt.Tx, k Key) *bolt.Bucket {
	b := tx.Bucket(bucketProfiles)
	for _, name := range k.path() {
		if b = b.Bucket(name); b == nil {
			return nil
		}
	}
	return b
}

// Get returns the profile stored under k, or an error wrapping ErrNotFound.
func (s *Store) Get(k Key) (Profile, error) {
	var p Profile
	err := s.view(func(tx *bolt.Tx) error {
		b := modeBucket(tx, k)
		var raw []byte
		if b != nil {
			raw = b.Get(k.key())
		}
		if raw == nil {
			return ErrNotFound
		}
		var err error
		p, err = decodeProfile(raw)
		return err
	})
	if err != nil {
		return p, fmt.Errorf("store %s: get %s: %w", s.path, k, err)
	}
	return p, nil
}

// Has reports whether a profile is stored under k.
func (s *Store) Has(k Key) (bool, error) {
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		b := modeBucket(tx, k)
		found = b != nil && b.Get(k.key()) != nil
		return nil
	})
	return found, err
}

// Filter selects profiles for List and Export; empty fields match everything.
type Filter struct {
	Board    string
	Workload string
	Role     truth.Role
}

// List returns the profiles matching f in key order (board, workload, role, mode key,
// batch).
func (s *Store) List(f Filter) ([]Profile, error) {
	var out []Profile
	err := s.view(func(tx *bolt.Tx) error {
		return walk(tx, f, func(k Key, raw []byte) error {
			p, err := decodeProfile(raw)
			if err != nil {
				return fmt.Errorf("%s: %w (run fulcrumctl profile check)", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: list: %w", s.path, err)
	}
	return out, nil
}

// Count is the number of stored profiles.
func (s *Store) Count() (int, error) {
	var n int
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		n, err = readCount(tx)
		return err
	})
	return n, err
}

// walk calls fn for every profile value under the filter, in key order. Keys are the
// parsed path; the value's own fields are not consulted (Check compares the two).
func walk(tx *bolt.Tx, f Filter, fn func(k Key, raw []byte) error) error {
	return eachBucket(tx.Bucket(bucketProfiles), f.Board, func(board []byte, bb *bolt.Bucket) error {
		return eachBucket(bb, f.Workload, func(wl []byte, wb *bolt.Bucket) error {
			return eachBucket(wb, string(f.Role), func(role []byte, rb *bolt.Bucket) error {
				return eachBucket(rb, "", func(mode []byte, mb *bolt.Bucket) error {
					k := Key{Board: string(board), Workload: string(wl), Role: truth.Role(role)}
					var err error
					if k.Mode, err = parseModeKey(mode); err != nil {
						return fmt.Errorf("profiles/%s/%s/%s: %w", board, wl, role, err)
					}
					return mb.ForEach(func(bk, v []byte) error {
						if v == nil {
							return fmt.Errorf("%s: %x is a bucket, want a batch key", k.Mode, bk)
						}
						if k.Batch, k.MicroBatch, err = parseBatchKey(bk); err != nil {
							return fmt.Errorf("profiles/%s/%s/%s/%s: %w", board, wl, role, mode, err)
						}
						return fn(k, v)
					})
				})
			})
		})
	})
}

// eachBucket calls fn for the child bucket named only (or every child when only is
// empty). A plain key where a bucket belongs is an error.
func eachBucket(b *bolt.Bucket, only string, fn func(name []byte, child *bolt.Bucket) error) error {
	if only != "" {
		if c := b.Bucket([]byte(only)); c != nil {
			return fn([]byte(only), c)
		}
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		if v != nil {
			return fmt.Errorf("key %q holds a value where a bucket belongs", k)
		}
		return fn(k, b.Bucket(k))
	})
}

// Delete removes the profile under k and the buckets it leaves empty.
func (s *Store) Delete(k Key) error {
	err := s.update(func(tx *bolt.Tx) error { return deleteTx(tx, k) })
	if err != nil {
		return fmt.Errorf("store %s: delete %s: %w", s.path, k, err)
	}
	return nil
}

// deleteTx removes the profile under k in tx and the buckets it leaves empty
// (ErrNotFound when there is none).
func deleteTx(tx *bolt.Tx, k Key) error {
	chain := []*bolt.Bucket{tx.Bucket(bucketProfiles)}
	for _, name := range k.path() {
		c := chain[len(chain)-1].Bucket(name)
		if c == nil {
			return ErrNotFound
		}
		chain = append(chain, c)
	}
	mb := chain[len(chain)-1]
	if mb.Get(k.key()) == nil {
		return ErrNotFound
	}
	if err := mb.Delete(k.key()); err != nil {
		return err
	}
	names := k.path()
	for i := len(chain) - 1; i > 0; i-- {
		if k, _ := chain[i].Cursor().First(); k != nil {
			break
		}
		if err := chain[i-1].DeleteBucket(names[i-1]); err != nil {
			return err
		}
	}
	return addCount(tx, -1)
}

// PutModel stores a searcher's learned model (any JSON) under key, replacing what was
// there: models are derived data, recomputable from the profiles.
func (s *Store) PutModel(key string, blob json.RawMessage) error {
	return s.putJSON(bucketModels, key, blob)
}

// GetModel returns the model stored under key, or an error wrapping ErrNotFound.
func (s *Store) GetModel(key string) (json.RawMessage, error) {
	return s.getJSON(bucketModels, key)
}

// PutCampaign stores a campaign progress record (JSON) under id, replacing what was there.
func (s *Store) PutCampaign(id string, rec json.RawMessage) error {
	return s.putJSON(bucketCampaigns, id, rec)
}

// GetCampaign returns the campaign record under id, or an error wrapping ErrNotFound.
func (s *Store) GetCampaign(id string) (json.RawMessage, error) {
	return s.getJSON(bucketCampaigns, id)
}

// Campaigns returns every campaign record by id.
func (s *Store) Campaigns() (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCampaigns).ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	return out, err
}

func (s *Store) putJSON(bucket []byte, key string, blob []byte) error {
	if key == "" {
		return fmt.Errorf("store %s: %s: empty key", s.path, bucket)
	}
	if !json.Valid(blob) {
		return fmt.Errorf("store %s: %s/%s: value is not valid JSON", s.path, bucket, key)
	}
	err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(key), blob) })
	if err != nil {
		return fmt.Errorf("store %s: put %s/%s: %w", s.path, bucket, key, err)
	}
	return nil
}

func (s *Store) getJSON(bucket []byte, key string) (json.RawMessage, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		out = bytes.Clone(v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: get %s/%s: %w", s.path, bucket, key, err)
	}
	return out, nil
}
