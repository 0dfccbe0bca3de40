package mutate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// The sidecar container is most of the pod patch, and encoding/json's
// reflective walk of its ~20 structs (env vars, mounts, security context)
// the largest part of the pod webhook's own CPU per admission
// (BenchmarkPodReview). Its structure depends on no pod: only its strings
// and resources do. So renderSidecar's JSON is encoded once per shape (which
// of its strings are empty, how many nested mounts) with a sentinel in place
// of every string and no resources, and split there into a template; an
// admission fills the template in with its strings and its encoded
// resources. The template is built from renderSidecar itself, and checked
// against json.Marshal of the real container of the admission that builds
// it, so it follows whatever renderSidecar renders: a shape whose check
// fails is encoded by json.Marshal every time.

// sidecarTemplate is renderSidecar's JSON for one shape: literal JSON
// between the places where a string field (value >= 0, an index into
// sidecarInput.stringFields) or the resources (value resourcesSlot) go.
type sidecarTemplate struct {
	literals [][]byte // len(slots)+1
	slots    []int
}

const resourcesSlot = -1

// maxSidecarShapes bounds the templates kept: a shape is a combination of
// which settings are empty and how many mounts nest under the artifact path,
// a handful in a cluster.
const maxSidecarShapes = 64

var sidecarTemplates = struct {
	sync.RWMutex
	byShape map[string]*sidecarTemplate // nil value: the shape encodes with json.Marshal
}{byShape: map[string]*sidecarTemplate{}}

// stringFields points at every string of in that renderSidecar writes into
// the container as it is; the order is the template's slot numbering.
func (in *sidecarInput) stringFields() []*string {
	fs := []*string{&in.image, &in.serverURL, &in.trainJob, &in.jobID, &in.workerID, &in.nodeRank, &in.heartbeat, &in.flushBudget,
		&in.include, &in.exclude, &in.artifactMount.Name, &in.artifactMount.SubPath}
	for k := range in.nestedMounts {
		m := &in.nestedMounts[k]
		fs = append(fs, &m.Name, &m.SubPath, &m.MountPath)
	}
	return fs
}

// templated says whether in is of the form planArtifacts and Inject give
// (mounts with no subPathExpr, propagation or recursive read-only setting;
// nested mounts read-only), the only one templates are made for: anything
// else is encoded with json.Marshal.
func (in *sidecarInput) templated() bool {
	a := in.artifactMount
	if a.SubPathExpr != "" || a.RecursiveReadOnly != nil {
		return false
	}
	for _, m := range in.nestedMounts {
		if m.SubPathExpr != "" || m.MountPropagation != nil || m.RecursiveReadOnly != nil || !m.ReadOnly {
			return false
		}
	}
	return true
}

// shape is the key of in's template: which of its strings are empty (an
// empty string may be omitted from the JSON).
func (in *sidecarInput) shape(fields []*string) string {
	key := make([]byte, len(fields))
	for k, f := range fields {
		key[k] = '0'
		if *f != "" {
			key[k] = '1'
		}
	}
	return string(key)
}

// appendSidecarJSON appends json.Marshal(renderSidecar(*in)) to dst.
func appendSidecarJSON(dst []byte, in *sidecarInput) ([]byte, error) {
	if !in.templated() {
		return appendMarshal(dst, renderSidecar(*in))
	}
	fields := in.stringFields()
	shape := in.shape(fields)
	sidecarTemplates.RLock()
	t, known := sidecarTemplates.byShape[shape]
	sidecarTemplates.RUnlock()
	if !known {
		var err error
		if t, err = learnSidecarTemplate(in, shape); err != nil {
			return dst, err
		}
	}
	if t == nil {
		return appendMarshal(dst, renderSidecar(*in))
	}
	return t.fill(dst, in, fields)
}

// fill appends the template with in's strings and resources.
func (t *sidecarTemplate) fill(dst []byte, in *sidecarInput, fields []*string) ([]byte, error) {
	var err error
	for k, slot := range t.slots {
		dst = append(dst, t.literals[k]...)
		if slot == resourcesSlot {
			if dst, err = appendResourcesJSON(dst, &in.resources); err != nil {
				return dst, err
			}
			continue
		}
		dst = appendJSONString(dst, *fields[slot])
	}
	return append(dst, t.literals[len(t.slots)]...), nil
}

// learnSidecarTemplate builds the template of in's shape, checks it against
// json.Marshal of in's container and keeps it (or, if the check fails,
// keeps that the shape has none) while fewer than maxSidecarShapes are kept.
func learnSidecarTemplate(in *sidecarInput, shape string) (*sidecarTemplate, error) {
	want, err := json.Marshal(renderSidecar(*in))
	if err != nil {
		return nil, err
	}
	t := newSidecarTemplate(in)
	if t != nil {
		got, err := t.fill(nil, in, in.stringFields())
		if err != nil || !bytes.Equal(got, want) {
			t = nil
		}
	}
	sidecarTemplates.Lock()
	if len(sidecarTemplates.byShape) < maxSidecarShapes {
		sidecarTemplates.byShape[shape] = t
	}
	sidecarTemplates.Unlock()
	return t, nil
}

// newSidecarTemplate renders in's shape with sentinels for its non-empty
// strings and no resources, and splits the JSON there; nil if a sentinel or
// the resources do not appear exactly once (renderSidecar changed a string,
// or dropped it).
func newSidecarTemplate(in *sidecarInput) *sidecarTemplate {
	probe := *in
	probe.nestedMounts = slices.Clone(in.nestedMounts)
	probe.resources = corev1.ResourceRequirements{}
	type place struct{ at, slot, n int }
	var places []place
	fields := probe.stringFields()
	for k, f := range fields {
		if *f != "" {
			*f = "\x00" + strconv.Itoa(k) + "\x00" // in no real value: a NUL cannot be in a header, path or name
		}
	}
	raw, err := json.Marshal(renderSidecar(probe))
	if err != nil {
		return nil
	}
	find := func(token []byte, slot int) bool {
		at := bytes.Index(raw, token)
		if at < 0 || bytes.Contains(raw[at+1:], token) {
			return false
		}
		places = append(places, place{at, slot, len(token)})
		return true
	}
	for k, f := range fields {
		if *f != "" && !find(fmt.Appendf(nil, `"\u0000%d\u0000"`, k), k) {
			return nil
		}
	}
	const noResources = `"resources":{}`
	if !find([]byte(noResources), resourcesSlot) {
		return nil
	}
	// The resources' value is the slot, not the key.
	places[len(places)-1].at += len(`"resources":`)
	places[len(places)-1].n = len(`{}`)
	slices.SortFunc(places, func(a, b place) int { return a.at - b.at })
	t := &sidecarTemplate{}
	last := 0
	for _, p := range places {
		t.literals = append(t.literals, raw[last:p.at])
		t.slots = append(t.slots, p.slot)
		last = p.at + p.n
	}
	t.literals = append(t.literals, raw[last:])
	return t
}

// appendResourcesJSON appends json.Marshal(r): the requests and limits, by
// resource name, of quantities in their canonical form; anything else
// (claims) through json.Marshal. encoding/json's sorting of map keys by
// reflection and re-scan of each Quantity's MarshalJSON are most of the
// sidecar's encoding otherwise.
func appendResourcesJSON(dst []byte, r *corev1.ResourceRequirements) ([]byte, error) {
	if len(r.Claims) > 0 {
		return appendMarshal(dst, r)
	}
	dst = append(dst, '{')
	var err error
	if len(r.Limits) > 0 {
		dst = append(dst, `"limits":`...)
		if dst, err = appendResourceList(dst, r.Limits); err != nil {
			return dst, err
		}
	}
	if len(r.Requests) > 0 {
		if len(r.Limits) > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `"requests":`...)
		if dst, err = appendResourceList(dst, r.Requests); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

func appendResourceList(dst []byte, l corev1.ResourceList) ([]byte, error) {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	slices.Sort(names)
	dst = append(dst, '{')
	for k, name := range names {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendJSONString(dst, name), ':')
		q, err := l[corev1.ResourceName(name)].MarshalJSON() // a quoted canonical quantity: digits, '.', '-', 'e' and a suffix
		if err != nil {
			return dst, err
		}
		dst = append(dst, q...)
	}
	return append(dst, '}'), nil
}

// appendMarshal appends json.Marshal(v).
func appendMarshal(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(dst, b...), err
}

// appendJSONString appends s as json.Marshal writes it: as is between
// quotes when it is printable ASCII that needs no escape (with encoding/json's
// HTML escaping of <, > and &), else through json.Marshal.
func appendJSONString(dst []byte, s string) []byte {
	for k := 0; k < len(s); k++ {
		if c := s[k]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
