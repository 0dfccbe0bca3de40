package localcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readObjects decodes every object of the YAML files given (directories are
// read non-recursively, *.yaml only, kustomization.yaml skipped).
func readObjects(paths ...string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(p, "*.yaml"))
		if err != nil {
			return nil, err
		}
		sort.Strings(matches)
		for _, m := range matches {
			if filepath.Base(m) != "kustomization.yaml" {
				files = append(files, m)
			}
		}
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		decoded, err := decodeObjects(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, decoded...)
	}
	return objs, nil
}

func decodeObjects(raw []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// apply creates or updates objs with server-side apply.
func apply(ctx context.Context, c client.Client, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		o.SetResourceVersion("")
		o.SetManagedFields(nil)
		if err := c.Patch(ctx, o, client.Apply, client.FieldOwner("localcluster"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// webhookCABundle sets the caBundle of every webhook of a Mutating- or
// ValidatingWebhookConfiguration, keeping its clientConfig's Service.
func webhookCABundle(o *unstructured.Unstructured, caBundle []byte) error {
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil {
		return err
	}
	for _, h := range hooks {
		hook := h.(map[string]any)
		cc, _ := hook["clientConfig"].(map[string]any)
		if cc == nil || cc["service"] == nil {
			return fmt.Errorf("webhook %v of %s has no Service reference", hook["name"], o.GetName())
		}
		cc["caBundle"] = base64.StdEncoding.EncodeToString(caBundle)
	}
	return unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
}

// webhookURLs rewrites the Service references of a Mutating- or
// ValidatingWebhookConfiguration to https://<addr><path> with caBundle, keeps
// only the webhooks whose path contains one of keep (all when keep is
// empty), and renames the configuration (upstream names collide without
// kustomize's namePrefix).
func webhookURLs(o *unstructured.Unstructured, name, addr string, caBundle []byte, keep ...string) error {
	return rewriteWebhooks(o, name, keep, func(path string) map[string]any {
		return map[string]any{"url": "https://" + addr + path, "caBundle": base64.StdEncoding.EncodeToString(caBundle)}
	})
}

// rewriteWebhooks renames configuration o and gives each of its webhooks
// (those whose path contains one of keep, if given) the client config
// clientConfig returns for its manifest's path.
func rewriteWebhooks(o *unstructured.Unstructured, name string, keep []string, clientConfig func(path string) map[string]any) error {
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil {
		return err
	}
	var kept []any
	for _, h := range hooks {
		hook := h.(map[string]any)
		path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
		if len(keep) > 0 && !containsAny(path, keep) {
			continue
		}
		hook["clientConfig"] = clientConfig(path)
		kept = append(kept, hook)
	}
	o.SetName(name)
	return unstructured.SetNestedSlice(o.Object, kept, "webhooks")
}

// conversionURL points a CRD's conversion webhook at https://<addr>/convert.
func conversionURL(crd *unstructured.Unstructured, addr string, caBundle []byte) error {
	return unstructured.SetNestedField(crd.Object, map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"clientConfig":             map[string]any{"url": "https://" + addr + "/convert", "caBundle": base64.StdEncoding.EncodeToString(caBundle)},
			"conversionReviewVersions": []any{"v1"},
		},
	}, "spec", "conversion")
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
