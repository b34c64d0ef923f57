package client

import (
	"bytes"
	"errors"
	"io"
)

// errLineTooLong reports a reply longer than the cap; it was skipped up to its newline.
var errLineTooLong = errors.New("reply line too long")

// lineReader splits a stream into lines. Unlike bufio.Reader, a read error (a timeout
// from a cancelled wait) loses nothing: a partial line stays buffered for the next call.
type lineReader struct {
	r          io.Reader
	max        int // cap on a line, newline included
	buf        []byte
	start, end int  // unread bytes are buf[start:end]
	skipping   bool // inside an over-long line, dropping bytes up to its newline
}

// next returns the next line without its newline (and a trailing \r). The slice is
// valid until the next call.
func (l *lineReader) next() ([]byte, error) {
	for {
		if i := bytes.IndexByte(l.buf[l.start:l.end], '\n'); i >= 0 {
			line := l.buf[l.start : l.start+i]
			l.start += i + 1
			if l.skipping {
				l.skipping = false
				return nil, errLineTooLong
			}
			return bytes.TrimSuffix(line, []byte{'\r'}), nil
		}
		if l.skipping {
			l.start, l.end = 0, 0
		} else if l.start > 0 {
			l.end = copy(l.buf, l.buf[l.start:l.end])
			l.start = 0
		}
		if l.end == len(l.buf) {
			switch {
			case len(l.buf) == 0:
				l.buf = make([]byte, min(4096, l.max))
			case len(l.buf) < l.max:
				l.buf = append(l.buf, make([]byte, min(len(l.buf), l.max-len(l.buf)))...)
			default:
				l.skipping, l.start, l.end = true, 0, 0
			}
		}
		n, err := l.r.Read(l.buf[l.end:])
		l.end += n
		if err != nil && n == 0 {
			return nil, err
		}
	}
}
