package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// The appended sidecar container is most of the pod patch, and
// encoding/json's reflective walk of its ~20 structs (env vars, mounts,
// security context) the largest part of the pod webhook's own CPU per
// admission. Its structure depends on no pod: only its strings and
// resources do. So its JSON is encoded once per shape (which of its strings
// are empty, how many there are) with a sentinel in place of every string
// and no resources, and split there into a template; an admission fills the
// template in with its strings and its encoded resources. The template is
// built from the webhook's own renderer (Container.Renderer), and checked
// against json.Marshal of the real container of the admission that builds
// it, so it follows whatever the renderer renders: a shape whose check fails
// is encoded by json.Marshal every time.

// Container is a container the patch appends whose JSON is a function of
// Fields and Resources alone: the webhook passes one only when that holds
// (a container with any other input is encoded by json.Marshal).
type Container struct {
	// Name is the container's name: the patch operation that appends it
	// is found by it.
	Name string
	// Fields are the strings the container is rendered from, in Render's
	// order.
	Fields []string
	// Resources are the container's resources.
	Resources corev1.ResourceRequirements
	// Renderer renders the container.
	Renderer Renderer
}

// Renderer renders a container from fields (as many as Container.Fields)
// and resources.
type Renderer interface {
	Render(fields []string, resources corev1.ResourceRequirements) corev1.Container
}

// template is a Container's JSON for one shape: literal JSON between the
// places where a string field (value >= 0, an index into Fields) or the
// resources (value resourcesSlot) go.
type template struct {
	literals [][]byte // len(slots)+1
	slots    []int
}

const resourcesSlot = -1

// maxShapes bounds the templates kept: a shape is a combination of which
// settings are empty and how many mounts nest under the artifact path, a
// handful in a cluster.
const maxShapes = 64

var templates = struct {
	sync.RWMutex
	byShape map[string]*template // nil value: the shape encodes with json.Marshal
}{byShape: map[string]*template{}}

// shape is the key of c's template: its name and which of its strings are
// empty (an empty string may be omitted from the JSON).
func (c *Container) shape() string {
	key := make([]byte, 0, len(c.Name)+1+len(c.Fields))
	key = append(append(key, c.Name...), 0)
	for _, f := range c.Fields {
		if f == "" {
			key = append(key, '0')
		} else {
			key = append(key, '1')
		}
	}
	return string(key)
}

// appendJSON appends json.Marshal(c.Renderer.Render(c.Fields, c.Resources)) to dst.
func (c *Container) appendJSON(dst []byte) ([]byte, error) {
	t, err := c.template()
	if err != nil {
		return dst, err
	}
	if t == nil {
		return appendMarshal(dst, c.Renderer.Render(c.Fields, c.Resources))
	}
	return t.fill(dst, c)
}

// Templated reports whether c's JSON comes from a template (learnt now if
// its shape has none yet) rather than from json.Marshal: the webhook's
// tests prove with it that its renderer stays one a template can follow.
func Templated(c *Container) (bool, error) {
	t, err := c.template()
	return t != nil, err
}

// template is c's shape's template, learnt if need be; nil: json.Marshal.
func (c *Container) template() (*template, error) {
	shape := c.shape()
	templates.RLock()
	t, known := templates.byShape[shape]
	templates.RUnlock()
	if known {
		return t, nil
	}
	return learnTemplate(c, shape)
}

// fill appends the template with c's strings and resources.
func (t *template) fill(dst []byte, c *Container) ([]byte, error) {
	var err error
	for k, slot := range t.slots {
		dst = append(dst, t.literals[k]...)
		if slot == resourcesSlot {
			if dst, err = appendResourcesJSON(dst, &c.Resources); err != nil {
				return dst, err
			}
			continue
		}
		dst = appendJSONString(dst, c.Fields[slot])
	}
	return append(dst, t.literals[len(t.slots)]...), nil
}

// learnTemplate builds the template of c's shape, checks it against
// json.Marshal of c's container and keeps it (or, if the check fails,
// keeps that the shape has none) while fewer than maxShapes are kept.
func learnTemplate(c *Container, shape string) (*template, error) {
	want, err := json.Marshal(c.Renderer.Render(c.Fields, c.Resources))
	if err != nil {
		return nil, err
	}
	t := newTemplate(c)
	if t != nil {
		got, err := t.fill(nil, c)
		if err != nil || !bytes.Equal(got, want) {
			t = nil
		}
	}
	templates.Lock()
	if len(templates.byShape) < maxShapes {
		templates.byShape[shape] = t
	}
	templates.Unlock()
	return t, nil
}

// newTemplate renders c's shape with sentinels for its non-empty strings and
// no resources, and splits the JSON there; nil if a sentinel or the
// resources do not appear exactly once (the renderer changed a string, or
// dropped it).
func newTemplate(c *Container) *template {
	type place struct{ at, slot, n int }
	var places []place
	probe := make([]string, len(c.Fields))
	for k, f := range c.Fields {
		if f != "" {
			probe[k] = "\x00" + strconv.Itoa(k) + "\x00" // in no real value: a NUL cannot be in a header, path or name
		}
	}
	raw, err := json.Marshal(c.Renderer.Render(probe, corev1.ResourceRequirements{}))
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
	for k, f := range probe {
		if f != "" && !find(fmt.Appendf(nil, `"\u0000%d\u0000"`, k), k) {
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
	t := &template{}
	last := 0
	for _, p := range places {
		t.literals = append(t.literals, raw[last:p.at])
		t.slots = append(t.slots, p.slot)
		last = p.at + p.n
	}
	t.literals = append(t.literals, raw[last:])
	return t
}
