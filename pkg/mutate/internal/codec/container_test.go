package codec

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

const testName = "sidecar"

// renderTest renders a container as a sidecar is rendered, from strings
// alone: an image, environment values, an artifact mount (name, subPath)
// and any number of nested mounts (name, subPath, mountPath), beside fields
// no string sets.
func renderTest(fields []string, resources corev1.ResourceRequirements) corev1.Container {
	c := corev1.Container{
		Name: testName, Image: fields[0], ImagePullPolicy: corev1.PullIfNotPresent,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: []corev1.EnvVar{{Name: "A", Value: fields[1]}, {Name: "B", Value: fields[2]}, {Name: "C", Value: fields[3]},
			{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
		Resources:       resources,
		VolumeMounts:    []corev1.VolumeMount{{Name: fields[4], SubPath: fields[5], MountPath: "/var/run/artifacts", ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
	}
	for k := 6; k+3 <= len(fields); k += 3 {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: fields[k], SubPath: fields[k+1], MountPath: fields[k+2], ReadOnly: true})
	}
	return c
}

// renderFunc is a Renderer of a function.
type renderFunc func([]string, corev1.ResourceRequirements) corev1.Container

func (f renderFunc) Render(fields []string, resources corev1.ResourceRequirements) corev1.Container {
	return f(fields, resources)
}

// testContainer is a Container of renderTest with fields and resources.
func testContainer(fields []string, resources corev1.ResourceRequirements) *Container {
	return &Container{Name: testName, Fields: fields, Resources: resources, Renderer: renderFunc(renderTest)}
}

var defaultResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi")},
}

// TestSidecarTemplateIsJSONMarshal: a container's JSON from its template is
// json.Marshal of the rendered container, byte for byte, whatever the
// strings (empty, escaped, HTML, non-ASCII, invalid UTF-8, unclean paths),
// the nested mounts and the resources.
func TestSidecarTemplateIsJSONMarshal(t *testing.T) {
	values := []string{"", "llama-finetune", "00000000-0000-4000-8000-000000000001", "https://tether.tether-system.svc:8443",
		"checkpoints/**,*.safetensors", `a"b\c`, "<script>&amp;</script>", "tab\there\nnewline", "héllo wörld", "\xff\xfe invalid",
		"\u2028\u2029", "/var/run/tether/artifacts//a/../b/", "0", "25s", "ghcr.io/tether-dev/tether-sidecar@sha256:0123"}
	resourceSets := []corev1.ResourceRequirements{
		defaultResources,
		{},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5"), corev1.ResourceEphemeralStorage: resource.MustParse("1G")}},
		{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1.5Gi"),
			"example.com/<weird>&": resource.MustParse("1e3")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.001")}},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
		{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	templated := 0
	for n := range 1000 {
		if n%20 == 0 {
			// Fewer shapes than maxShapes between resets: each template is
			// learnt from one input and filled in for others.
			resetTemplates()
		}
		fields := make([]string, 6+3*rng.IntN(4))
		for k := range fields {
			fields[k] = values[rng.IntN(len(values))]
		}
		c := testContainer(fields, resourceSets[n%len(resourceSets)])
		want, err := json.Marshal(renderTest(c.Fields, c.Resources))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.appendJSON([]byte("prefix"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("fields %q: template wrote\n%s\njson.Marshal writes\n%s", fields, got, want)
		}
		if ok, err := Templated(c); err != nil {
			t.Fatal(err)
		} else if ok {
			templated++
		}
	}
	t.Logf("%d of 1000 inputs encoded from a template", templated)
	if templated < 900 {
		t.Errorf("only %d of 1000 inputs were encoded from a template", templated)
	}
}

// TestRendererATemplateCannotFollow: a renderer that writes a string twice,
// or changes it, gets no template, and its containers are encoded by
// json.Marshal.
func TestRendererATemplateCannotFollow(t *testing.T) {
	defer resetTemplates()
	for name, render := range map[string]func([]string, corev1.ResourceRequirements) corev1.Container{
		"string twice": func(f []string, r corev1.ResourceRequirements) corev1.Container {
			return corev1.Container{Name: f[0], Image: f[0], Resources: r}
		},
		"string changed": func(f []string, r corev1.ResourceRequirements) corev1.Container {
			return corev1.Container{Name: "x", Image: f[0] + ":latest", Resources: r}
		},
		"resources dropped": func(f []string, _ corev1.ResourceRequirements) corev1.Container {
			return corev1.Container{Name: "x", Image: f[0]}
		},
	} {
		t.Run(name, func(t *testing.T) {
			resetTemplates()
			c := &Container{Name: name, Fields: []string{"img"}, Resources: defaultResources, Renderer: renderFunc(render)}
			if ok, err := Templated(c); err != nil || ok {
				t.Errorf("Templated = %v, %v; want false", ok, err)
			}
			want, _ := json.Marshal(render(c.Fields, c.Resources))
			got, err := c.appendJSON(nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("wrote %s (%v), want %s", got, err, want)
			}
		})
	}
}

func resetTemplates() {
	templates.Lock()
	templates.byShape = map[string]*template{}
	templates.Unlock()
}

// FuzzContainerTemplate: whatever the strings, a container's JSON from its
// template is json.Marshal's.
func FuzzContainerTemplate(f *testing.F) {
	f.Add("ghcr.io/tether-dev/tether-sidecar:v0.1.0", "llama-finetune", "checkpoints/**", "", "initializer", "sub/dir", "/var/run/tether/artifacts/x")
	f.Add("", "<&>", "\xff", "\u2028", "", "", "")
	f.Fuzz(func(t *testing.T, image, a, b, c, volume, subPath, nested string) {
		fields := []string{image, a, b, c, volume, subPath}
		if nested != "" {
			fields = append(fields, volume, subPath, nested)
		}
		ct := testContainer(fields, defaultResources)
		want, err := json.Marshal(renderTest(fields, ct.Resources))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ct.appendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("template wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	})
}
