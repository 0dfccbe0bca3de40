package tuning

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func TestClientSettingsDisableClientSideLimit(t *testing.T) {
	in := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 5, Burst: 10}
	out := ClientSettings(in)
	if out.QPS != -1 {
		t.Errorf("QPS %v, want -1 (client-side limit off)", out.QPS)
	}
	if in.QPS != 5 || in.Burst != 10 {
		t.Errorf("the input was modified: QPS %v Burst %d", in.QPS, in.Burst)
	}
	// client-go builds no token bucket for a negative QPS.
	c, err := rest.RESTClientFor(&rest.Config{Host: out.Host, QPS: out.QPS, Burst: out.Burst, APIPath: "/api",
		ContentConfig: rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: clientgoscheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	if rl := c.GetRateLimiter(); rl != nil {
		t.Errorf("client-side rate limiter at %v QPS, want none", rl.QPS())
	}
}
