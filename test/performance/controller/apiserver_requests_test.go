package controller_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiRequests counts kube-apiserver's requests by "VERB resource[/subresource]",
// with the code after it when it is not 2xx (apiserver_request_total, all
// clients), read from its /metrics as the benchmark's admin: where a phase's
// API work goes, and what of it was refused.
type apiRequests map[string]float64

func readAPIRequests(b *testing.B, ctx context.Context, cfg *rest.Config) apiRequests {
	b.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Log("reading kube-apiserver's /metrics:", err)
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Log("parsing kube-apiserver's /metrics:", err)
		return nil
	}
	out := apiRequests{}
	f := families["apiserver_request_total"]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		if c := l["code"]; c != "" && c[0] != '2' {
			key += " " + c
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// per returns what changed since before, per unit (a TrainJob, an object),
// the largest first, as "VERB resource: n.nn" entries; total is their sum.
func (a apiRequests) per(before apiRequests, units int) (entries []string, total float64) {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	for k, v := range a {
		if n := v - before[k]; n >= float64(units)/20 { // at least one per 20 units
			d = append(d, kv{k, n / float64(units)})
			total += n / float64(units)
		}
	}
	slices.SortFunc(d, func(x, y kv) int { return cmp.Or(cmp.Compare(y.v, x.v), strings.Compare(x.k, y.k)) })
	for _, e := range d {
		entries = append(entries, fmt.Sprintf("%s: %.2f", e.k, e.v))
	}
	return entries, total
}

// profileAPIServer, when path is not empty, starts a CPU profile of
// kube-apiserver for the given seconds (its /debug/pprof, on by default) and
// returns the function that waits for it and writes it to path: where the
// API server's CPU of a phase goes. With no path it does nothing.
func profileAPIServer(b *testing.B, ctx context.Context, cfg *rest.Config, path string, seconds int) func() {
	b.Helper()
	if path == "" {
		return func() {}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
		if err != nil {
			b.Logf("%s: kube-apiserver's CPU profile: %v", path, err)
			return
		}
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			b.Log(err)
		}
	}()
	return func() { <-done }
}

// profileSelf writes this process's CPU profile (the control plane's, with
// the benchmark's client and watches) to path until the returned func is
// called; nothing when path is empty.
func profileSelf(b *testing.B, path string) func() {
	b.Helper()
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Log(err)
		}
	}
}
