package binding_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-dev/tether/pkg/binding"
)

func ExampleDecodeFrame() {
	f, err := binding.DecodeFrame([]byte(`{"type":"command","command":{"id":"c-7","name":"flush","reason":"checkpoint"}}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Type, f.Command.ID, f.Command.Name)

	// A frame whose payload does not match its type is refused.
	_, err = binding.DecodeFrame([]byte(`{"type":"heartbeat","ack":{"seq":1}}`))
	fmt.Println(err)
	// Output:
	// command c-7 flush
	// malformed frame: heartbeat frame without heartbeat payload
}

func ExampleTokenFromHeader() {
	token := strings.Repeat("0123456789abcdef", 4)
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, "bearer "+token)
	got, err := binding.TokenFromHeader(h)
	fmt.Println(got == token, err)

	h.Set(binding.HeaderAuthorization, "Bearer "+strings.ToUpper(token))
	_, err = binding.TokenFromHeader(h)
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true
}

func ExampleProgressReader() {
	dir, err := os.MkdirTemp("", "artifacts")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// The trainer appends one JSON object per line; the last line is still
	// being written.
	lines := "{\"step\":100,\"loss\":0.5}\n{\"step\":200,\"loss\":0.25,\"fraction\":0.4}\n{\"step\":30"
	if err := os.WriteFile(filepath.Join(dir, binding.ProgressFile), []byte(lines), 0o644); err != nil {
		panic(err)
	}
	p, err := binding.NewProgressReader(dir).Read()
	if err != nil {
		panic(err)
	}
	fmt.Println(*p.Step, *p.Loss, *p.Fraction)
	// Output: 200 0.25 0.4
}
