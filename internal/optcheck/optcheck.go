// Package optcheck is the vocabulary of options structs' Validate methods (sched.Config,
// control.Config, daemon.Options): each failed range check is a *FieldError naming the
// Go field, so a caller that decoded the struct from a file (fulcrumd) can name the
// file's key instead.
package optcheck

import (
	"errors"
	"fmt"
)

// FieldError is one field out of range.
type FieldError struct {
	Field   string // Go field path inside the validated struct: "OverrunMin", "Sched.OverrunMin"
	Problem string // what is wrong, phrased to follow the field's name: "must be positive"
	Value   any    // the value refused (a caller naming a key prints it in the key's unit)
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %s, got %v", e.Field, e.Problem, e.Value) }

// Checks collects the failures of one Validate.
type Checks struct{ errs []error }

// Fail records that field's value is out of range.
func (c *Checks) Fail(field string, value any, problem string) {
	c.errs = append(c.errs, &FieldError{Field: field, Problem: problem, Value: value})
}

// Nest records the failures of a nested struct's Validate with their fields under prefix
// (the nested struct's field name), so the path stays complete.
func (c *Checks) Nest(prefix string, err error) {
	for _, e := range Fields(err) {
		c.errs = append(c.errs, &FieldError{Field: prefix + "." + e.Field, Problem: e.Problem, Value: e.Value})
	}
	for _, e := range Others(err) {
		c.errs = append(c.errs, fmt.Errorf("%s: %w", prefix, e))
	}
}

// Err joins the failures; nil when there were none.
func (c *Checks) Err() error { return errors.Join(c.errs...) }

// Number is what the range checks compare: counts, ratios and durations (time.Duration
// prints with its unit).
type Number interface {
	~int | ~int64 | ~float64
}

// Positive requires v > 0.
func Positive[T Number](c *Checks, field string, v T) {
	if !(v > 0) {
		c.Fail(field, v, "must be positive")
	}
}

// NonNegative requires v ≥ 0.
func NonNegative[T Number](c *Checks, field string, v T) {
	if !(v >= 0) {
		c.Fail(field, v, "must not be negative")
	}
}

// Fraction requires 0 < v < 1.
func Fraction(c *Checks, field string, v float64) {
	if !(v > 0 && v < 1) {
		c.Fail(field, v, "must be in (0,1)")
	}
}

// Fields returns the *FieldErrors in err, looking through errors.Join.
func Fields(err error) []*FieldError {
	var out []*FieldError
	walk(err, func(e error) {
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
		}
	})
	return out
}

// Others returns the errors in err that are not *FieldErrors.
func Others(err error) []error {
	var out []error
	walk(err, func(e error) {
		if _, ok := e.(*FieldError); !ok {
			out = append(out, e)
		}
	})
	return out
}

func walk(err error, fn func(error)) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			walk(e, fn)
		}
		return
	}
	fn(err)
}
