// Package manifestschema validates manifests against docs/manifest.schema.json,
// the JSON Schema of manifest.json that the contract publishes for readers
// in any language: unit, integration and e2e tests check that the manifests
// the real sidecar writes are what the schema says.
package manifestschema

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Path is the schema's file.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "manifest.schema.json")
}

// schemaID is the schema's $id, under which it is compiled.
const schemaID = "https://tether.dev/schemas/manifest.schema.json"

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	raw, err := os.ReadFile(Path())
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s is not JSON: %w", Path(), err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaID, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaID)
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid JSON Schema: %w", Path(), err)
	}
	return s, nil
})

// Validate checks a manifest's bytes against the schema; the error names
// every member that does not match.
func Validate(manifest []byte) error {
	s, err := compiled()
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(manifest))
	if err != nil {
		return fmt.Errorf("the manifest is not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		// %#v: every failing member with its keyword, not only the first line.
		return fmt.Errorf("the manifest does not match %s: %#v", filepath.Base(Path()), err)
	}
	return nil
}
