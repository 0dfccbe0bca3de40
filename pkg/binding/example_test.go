package binding_test

import (
	"fmt"
	"net/http"
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
	fmt.Println(string(got) == token, err)

	h.Set(binding.HeaderAuthorization, "Bearer "+strings.ToUpper(token))
	_, err = binding.TokenFromHeader(h)
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true
}
