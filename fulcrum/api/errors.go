package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes.
const (
	CodeBadRequest   = "bad_request" // malformed body or query
	CodeBadBudget    = "bad_budget"  // a budget out of range
	CodeBadMode      = "bad_mode"    // a mode the board does not have
	CodeBadMethod    = "bad_method"  // unknown optimize method
	CodeNotFound     = "not_found"   // no such endpoint
	CodeMethod       = "method_not_allowed"
	CodeTooLarge     = "too_large"      // body over the limit
	CodeForbidden    = "forbidden"      // caller may not change things
	CodeBusy         = "busy"           // e.g. an optimize is running
	CodeUnavailable  = "unavailable"    // the daemon cannot do it now (no board, no profiles)
	CodeNotStoodDown = "not_stood_down" // mode resume while fulcrumd drives the board
	CodeInternal     = "internal"
)

// Error is an API error: the HTTP status, a stable code, the field at fault (JSON name)
// and a message that says what to do. It is the body {"error": {...}} of every
// non-2xx answer.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return e.Message
}

// Errorf builds an *Error.
func Errorf(status int, code, field, format string, a ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, a...)}
}

// ErrorBody is the JSON form of an error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// AsError returns err as an *Error: itself when it is (or wraps) one, else a 500.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Status == 0 {
			c := *e
			c.Status = http.StatusBadRequest
			return &c
		}
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
}
