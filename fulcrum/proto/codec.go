package proto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Decoder reads one message per line with a cap on the line length. A line that is too
// long is discarded up to its newline and reported as a *Error, so the stream stays in
// step; any other *Error is also recoverable. Other errors (io.EOF, a closed socket) end
// the stream.
type Decoder struct {
	r   *bufio.Reader
	max int
}

// NewDecoder reads from r with lines capped at maxLine bytes (MaxLineBytes when ≤ 0).
func NewDecoder(r io.Reader, maxLine int) *Decoder {
	if maxLine <= 0 {
		maxLine = MaxLineBytes
	}
	return &Decoder{r: bufio.NewReaderSize(r, maxLine), max: maxLine}
}

// ReadLine returns the next line without its newline. An over-long line yields a
// *Error with CodeTooLong after the rest of it has been skipped. The returned slice is
// valid until the next call.
func (d *Decoder) ReadLine() ([]byte, error) {
	line, err := d.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// Skip the rest of the line so the next read starts at a message boundary.
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = d.r.ReadSlice('\n')
		}
		if err != nil {
			return nil, err
		}
		return nil, Errorf(CodeTooLong, "", "line longer than %d bytes was discarded; split the message (e.g. fewer requests per arrivals)", d.max)
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0 {
			// A final line without a newline is still a message.
			return bytes.TrimRight(line, "\r"), nil
		}
		return nil, err
	}
	line = line[:len(line)-1]
	return bytes.TrimRight(line, "\r"), nil
}

// Next reads, parses and validates the next non-blank line a worker sent. Recoverable
// problems come back as a *Error; the caller replies and reads on.
func (d *Decoder) Next() (Msg, error) {
	for {
		line, err := d.ReadLine()
		if err != nil {
			return Msg{}, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, perr := ParseRequest(line)
		if perr != nil {
			return m, perr
		}
		return m, nil
	}
}

// Parse decodes one line into a message without checking it against any role (workers
// use it for fulcrumd's replies). Unknown fields are ignored for forward compatibility.
func Parse(line []byte) (Msg, *Error) {
	var m Msg
	if err := json.Unmarshal(line, &m); err != nil {
		var partial struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(line, &partial)
		return Msg{}, Errorf(CodeBadJSON, clip(partial.Type), "not a JSON message object (%s); send one JSON object per line, see docs/protocol.md", clip(err.Error()))
	}
	return m, nil
}

// ParseRequest decodes and validates one line a worker sent.
func ParseRequest(line []byte) (Msg, *Error) {
	m, err := Parse(line)
	if err != nil {
		return m, err
	}
	if verr := m.Validate(); verr != nil {
		return m, verr
	}
	return m, nil
}

// Encode returns m as one line, newline included.
func Encode(m Msg) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	return append(b, '\n'), nil
}
