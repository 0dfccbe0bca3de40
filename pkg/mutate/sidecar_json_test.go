package mutate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestSidecarTemplateIsJSONMarshal: the sidecar's JSON from its template is
// json.Marshal(renderSidecar(in)), byte for byte, whatever the strings
// (empty, escaped, HTML, non-ASCII, invalid UTF-8, unclean paths), the
// nested mounts and the resources; inputs not of planArtifacts' form are
// encoded with json.Marshal.
func TestSidecarTemplateIsJSONMarshal(t *testing.T) {
	values := []string{"", "llama-finetune", "00000000-0000-4000-8000-000000000001", "https://tether.tether-system.svc:8443",
		"checkpoints/**,*.safetensors", `a"b\c`, "<script>&amp;</script>", "tab\there\nnewline", "héllo wörld", "\xff\xfe invalid",
		"\u2028\u2029", "/var/run/tether/artifacts//a/../b/", "0", "25s", "ghcr.io/tether-dev/tether-sidecar@sha256:0123"}
	resourceSets := []corev1.ResourceRequirements{
		DefaultSidecarResources(),
		{},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5"), corev1.ResourceEphemeralStorage: resource.MustParse("1G")}},
		{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1.5Gi"),
			"example.com/<weird>&": resource.MustParse("1e3")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.001")}},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
		{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return values[rng.IntN(len(values))] }
	templated := 0
	for n := range 1000 {
		if n%20 == 0 {
			// Fewer shapes than maxSidecarShapes between resets: each
			// template is learned from one input and filled in for others.
			resetSidecarTemplates()
		}
		in := sidecarInput{resources: resourceSets[n%len(resourceSets)]}
		for k := range rng.IntN(4) {
			in.nestedMounts = append(in.nestedMounts, corev1.VolumeMount{Name: fmt.Sprintf("m%d", k), MountPath: pick(), SubPath: pick(), ReadOnly: true})
		}
		for _, f := range in.stringFields() {
			*f = pick()
		}
		switch n % 50 {
		case 1: // not planArtifacts' form: json.Marshal
			in.artifactMount.SubPathExpr = "$(POD)"
		case 2:
			in.nestedMounts = append(in.nestedMounts, corev1.VolumeMount{Name: "p", MountPath: "/p", ReadOnly: true,
				MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)})
		}
		want, err := json.Marshal(renderSidecar(in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendSidecarJSON([]byte("prefix"), &in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("input %+v: template wrote\n%s\njson.Marshal writes\n%s", in, got, want)
		}
		if in.templated() {
			sidecarTemplates.RLock()
			tmpl := sidecarTemplates.byShape[in.shape(in.stringFields())]
			sidecarTemplates.RUnlock()
			if tmpl != nil {
				templated++
			}
		}
	}
	t.Logf("%d of 1000 inputs encoded from a template", templated)
	if templated < 900 {
		t.Errorf("only %d of 1000 inputs were encoded from a template", templated)
	}
}

func resetSidecarTemplates() {
	sidecarTemplates.Lock()
	sidecarTemplates.byShape = map[string]*sidecarTemplate{}
	sidecarTemplates.Unlock()
}

// TestGoldenSidecarsUseTemplates: every golden case's appended sidecar is
// encoded from a template, not by the json.Marshal fallback.
func TestGoldenSidecarsUseTemplates(t *testing.T) {
	dir := goldenDir{dir: "testdata/pod", optional: []string{".trainjob.yaml"}}
	n := 0
	for _, name := range dir.cases(t) {
		var pod corev1.Pod
		if err := json.Unmarshal(readJSON(t, dir.path(name, inSuffix)), &pod); err != nil {
			t.Fatal(err)
		}
		h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(t, dir.path(name, ".trainjob.yaml"))}
		tj, _ := h.lookup(t.Context(), &pod)
		_, appended := h.Injector.inject(&pod, tj)
		if appended == nil {
			continue
		}
		n++
		if _, err := appendSidecarJSON(nil, appended); err != nil {
			t.Fatal(err)
		}
		sidecarTemplates.RLock()
		tmpl := sidecarTemplates.byShape[appended.shape(appended.stringFields())]
		sidecarTemplates.RUnlock()
		if !appended.templated() || tmpl == nil {
			t.Errorf("%s: the sidecar is encoded with json.Marshal, not from a template", name)
		}
	}
	if n == 0 {
		t.Fatal("no golden case appends the sidecar")
	}
}

// FuzzSidecarTemplate: whatever the strings, the sidecar's JSON from its
// template is json.Marshal's.
func FuzzSidecarTemplate(f *testing.F) {
	f.Add("ghcr.io/tether-dev/tether-sidecar:v0.1.0", "llama-finetune", "checkpoints/**", "", "initializer", "sub/dir", "/var/run/tether/artifacts/x")
	f.Add("", "<&>", "\xff", "\u2028", "", "", "")
	f.Fuzz(func(t *testing.T, image, trainJob, include, exclude, volume, subPath, nested string) {
		in := sidecarInput{image: image, serverURL: "https://tether.tether-system.svc:8443", trainJob: trainJob, jobID: trainJob + "-id",
			workerID: "w", nodeRank: "3", heartbeat: "10s", flushBudget: "25s", include: include, exclude: exclude,
			artifactMount: corev1.VolumeMount{Name: volume, SubPath: subPath}, resources: DefaultSidecarResources()}
		if nested != "" {
			in.nestedMounts = []corev1.VolumeMount{{Name: volume, SubPath: subPath, MountPath: nested, ReadOnly: true}}
		}
		want, err := json.Marshal(renderSidecar(in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendSidecarJSON(nil, &in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("template wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	})
}
