package proto

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecoderRecoversFromBadLines(t *testing.T) {
	long := `{"type":"heartbeat","message":"` + strings.Repeat("x", 200) + `"}`
	in := strings.Join([]string{
		`{"type":"register","v":1,"role":"train","workload":"resnet18","batch":32}`,
		`not json`,
		long,
		``,
		`{"type":"nope"}`,
		`{"type":"acquire","seq":7}`,
		`{"type":"register","v":2,"role":"train","workload":"w"}`,
		`{"type":"heartbeat"}`,
	}, "\n")
	d := NewDecoder(strings.NewReader(in), 128)
	var got []string
	for {
		line, err := d.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		var pe *Error
		if errors.As(err, &pe) {
			got = append(got, pe.Code)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		m, perr := ParseRequest(line)
		if perr != nil {
			got = append(got, perr.Code)
			continue
		}
		got = append(got, m.Type)
	}
	want := []string{"register", CodeBadJSON, CodeTooLong, CodeUnknownType, "acquire", CodeBadVersion, "heartbeat"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		line string
		code string
	}{
		{"register ok", `{"type":"register","v":1,"role":"infer","workload":"yolo","batch":8,"batch_sizes":[1,2,4,8]}`, ""},
		{"register no version", `{"type":"register","role":"infer","workload":"yolo"}`, CodeBadVersion},
		{"register bad role", `{"type":"register","v":1,"role":"both","workload":"yolo"}`, CodeInvalid},
		{"register no workload", `{"type":"register","v":1,"role":"train"}`, CodeInvalid},
		{"register bad batch size", `{"type":"register","v":1,"role":"infer","workload":"a","batch_sizes":[0]}`, CodeInvalid},
		{"register micro-batches ok", `{"type":"register","v":1,"role":"train","workload":"r","batch":32,"micro_batches":[4,8,16,32]}`, ""},
		{"register micro-batch not a divisor", `{"type":"register","v":1,"role":"train","workload":"r","batch":32,"micro_batches":[4,12]}`, CodeInvalid},
		{"register micro-batch zero", `{"type":"register","v":1,"role":"train","workload":"r","batch":32,"micro_batches":[0]}`, CodeInvalid},
		{"register micro-batch above batch", `{"type":"register","v":1,"role":"train","workload":"r","batch":32,"micro_batches":[64]}`, CodeInvalid},
		{"register micro-batch repeated", `{"type":"register","v":1,"role":"train","workload":"r","batch":32,"micro_batches":[8,8]}`, CodeInvalid},
		{"register micro-batches too many", `{"type":"register","v":1,"role":"train","workload":"r","batch":4096,"micro_batches":[1,2,4,8,16,32,64,128,256,512,1024,2048,4096,1,2,4,8]}`, CodeInvalid},
		{"register micro-batches without batch", `{"type":"register","v":1,"role":"train","workload":"r","micro_batches":[1]}`, CodeInvalid},
		{"register micro-batches on inference", `{"type":"register","v":1,"role":"infer","workload":"r","batch":8,"micro_batches":[4]}`, CodeInvalid},
		{"arrivals empty", `{"type":"arrivals"}`, CodeInvalid},
		{"arrivals no id", `{"type":"arrivals","requests":[{"age_ms":1}]}`, CodeInvalid},
		{"arrivals negative age", `{"type":"arrivals","requests":[{"id":"a","age_ms":-1}]}`, CodeInvalid},
		{"arrivals ok", `{"type":"arrivals","requests":[{"id":"a","age_ms":1.5}]}`, ""},
		{"release no grant", `{"type":"release","duration_ms":3}`, CodeInvalid},
		{"release negative duration", `{"type":"release","grant":1,"duration_ms":-3}`, CodeInvalid},
		{"release ok", `{"type":"release","grant":1,"duration_ms":3,"results":[{"id":"a","ok":true}]}`, ""},
		{"server type", `{"type":"grant"}`, CodeUnknownType},
		{"no type", `{}`, CodeBadJSON},
		{"array", `[1,2]`, CodeBadJSON},
		{"trailing", `{"type":"heartbeat"} x`, CodeBadJSON},
		{"wrong field type", `{"type":"release","grant":"one"}`, CodeBadJSON},
		{"future version", `{"type":"heartbeat","v":9}`, CodeBadVersion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(c.line))
			code := ""
			if err != nil {
				code = err.Code
				if err.Message == "" {
					t.Errorf("error %s has no message", err.Code)
				}
			}
			if code != c.code {
				t.Fatalf("code %q, want %q (%v)", code, c.code, err)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	m := Msg{Type: TypeGrant, Grant: 3, Kind: KindInfer, Batch: 2, RequestIDs: []string{"a", "b"}, DeadlineMS: 12.5, Seq: 4}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if b[len(b)-1] != '\n' || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("not one line: %q", b)
	}
	got, perr := Parse(b[:len(b)-1])
	if perr != nil {
		t.Fatal(perr)
	}
	if got.Grant != 3 || got.Kind != KindInfer || len(got.RequestIDs) != 2 || got.DeadlineMS != 12.5 || got.Seq != 4 {
		t.Fatalf("round trip changed the message: %+v", got)
	}
}

// TestMicroBatchWire: the old register bytes (no micro_batches) still parse as before
// (whole minibatches), a whole-minibatch grant carries no micro_batch field, and a
// micro-batch grant carries it.
func TestMicroBatchWire(t *testing.T) {
	old := `{"type":"register","v":1,"role":"train","workload":"resnet18","batch":32,"pid":7,"seq":1}`
	m, err := ParseRequest([]byte(old))
	if err != nil || m.MicroBatches != nil || m.Batch != 32 {
		t.Fatalf("old register: %+v, %v", m, err)
	}
	whole, _ := Encode(Msg{Type: TypeGrant, Grant: 1, Kind: KindTrain, Batch: 32, DeadlineMS: 90})
	if strings.Contains(string(whole), "micro_batch") {
		t.Fatalf("a whole-minibatch grant names micro_batch (old clients would not expect it): %s", whole)
	}
	micro, _ := Encode(Msg{Type: TypeGrant, Grant: 2, Kind: KindTrain, Batch: 32, MicroBatch: 8, DeadlineMS: 30})
	got, perr := Parse(micro[:len(micro)-1])
	if perr != nil || got.MicroBatch != 8 || got.Batch != 32 || !strings.Contains(string(micro), `"micro_batch":8`) {
		t.Fatalf("micro-batch grant: %s → %+v, %v", micro, got, perr)
	}
}

// FuzzDecode feeds arbitrary bytes through the decoder: it must never panic, every
// recoverable error must carry a code and a message, and it must always make progress.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"register","v":1,"role":"train","workload":"resnet18","batch":32}` + "\n"))
	f.Add([]byte(`{"type":"arrivals","requests":[{"id":"r1","age_ms":0.5}]}` + "\n{\"type\":\"acquire\"}\n"))
	f.Add([]byte(`{"type":"release","grant":1,"duration_ms":1e400}`))
	f.Add([]byte("\x00\xff{\"type\":\n\n\n"))
	f.Add([]byte(`{"type":"heartbeat","v":-1,"requests":null,"results":[{}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(strings.NewReader(string(data)), 256)
		for i := 0; i < len(data)+2; i++ {
			m, err := d.Next()
			if err == nil {
				if verr := m.Validate(); verr != nil {
					t.Fatalf("Next returned an invalid message without error: %v", verr)
				}
				continue
			}
			var pe *Error
			if errors.As(err, &pe) {
				if pe.Code == "" || pe.Message == "" {
					t.Fatalf("protocol error without code or message: %#v", pe)
				}
				continue
			}
			return // end of stream
		}
		t.Fatalf("decoder made no progress on %d bytes", len(data))
	})
}
