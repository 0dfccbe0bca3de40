package mutate

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// BenchmarkPodHandlerDeclared is what completing a declared sidecar (Kueue
// mode: field checks, resource reconciliation, a JSON diff of one container)
// costs against appending one, through PodHandler.Handle in process, both
// measured in the same loop, interleaved: "declared/appended" is the ratio
// of their time per admission.
func BenchmarkPodHandlerDeclared(b *testing.B) {
	type path struct {
		name string
		h    *PodHandler
		req  admission.Request
		took time.Duration
	}
	var paths []*path
	for _, name := range []string{"injected-default", "declared-sidecar"} {
		raw := readJSON(b, "testdata/pod/"+name+".in.yaml")
		paths = append(paths, &path{
			name: name,
			h:    &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(b, "testdata/pod/"+name+".trainjob.yaml")},
			req: admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ml-team",
				Object: runtime.RawExtension{Raw: raw}}},
		})
	}
	ctx := context.Background()
	for _, p := range paths {
		if resp := p.h.Handle(ctx, p.req); !resp.Allowed || len(resp.Patch) == 0 {
			b.Fatalf("%s: not injected: %+v", p.name, resp.Result)
		}
	}
	n := 0
	for b.Loop() {
		// Alternate the order so neither path always runs first.
		for k := range paths {
			p := paths[(k+n)%len(paths)]
			start := time.Now()
			p.h.Handle(ctx, p.req)
			p.took += time.Since(start)
		}
		n++
	}
	appended, declared := paths[0].took, paths[1].took
	b.ReportMetric(float64(appended.Nanoseconds())/float64(n), "appended-ns/op")
	b.ReportMetric(float64(declared.Nanoseconds())/float64(n), "declared-ns/op")
	b.ReportMetric(float64(declared)/float64(appended), "declared/appended")
}
