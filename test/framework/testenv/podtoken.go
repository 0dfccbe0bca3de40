package testenv

import (
	"context"
	"fmt"
	"os"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// PodToken mints what the kubelet projects into the sidecar's
// tether-pod-token volume: a ServiceAccount token of the pod's
// ServiceAccount, audience names.PodTokenAudience, bound to the pod
// (TokenRequest with a Pod boundObjectRef), so the API server's TokenReview
// names the pod. No kubelet runs in these environments; cs must be allowed
// to create serviceaccounts/token (the kubelet is).
func PodToken(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (string, error) {
	if pod.Spec.ServiceAccountName == "" {
		return "", fmt.Errorf("pod %s/%s has no serviceAccountName: no token can be bound to it", pod.Namespace, pod.Name)
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{
			Audiences:         []string{names.PodTokenAudience},
			ExpirationSeconds: ptr.To[int64](trainjob.PodTokenExpirationSeconds),
			BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("pod token of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return tr.Status.Token, nil
}

// WritePodToken writes PodToken into file, as the kubelet keeps the
// projected volume's file.
func WritePodToken(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, file string) error {
	token, err := PodToken(ctx, cs, pod)
	if err != nil {
		return err
	}
	return os.WriteFile(file, []byte(token), 0o600)
}
