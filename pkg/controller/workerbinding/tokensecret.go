package workerbinding

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// loadToken reads the TrainJob's token Secret. It returns the Secret (nil
// when absent) and its token ("" when absent or malformed); a Secret of that
// name that the TrainJob does not own is an error.
func (r *Reconciler) loadToken(ctx context.Context, tj *unstructured.Unstructured) (*corev1.Secret, binding.Token, error) {
	key := types.NamespacedName{Namespace: tj.GetNamespace(), Name: tj.GetName()}
	secret := r.written.FreshSecret(key, r.now())
	var err error
	if secret == nil {
		secret = &corev1.Secret{}
		err = r.Secrets.Get(ctx, types.NamespacedName{Namespace: tj.GetNamespace(), Name: binding.TokenSecretName(tj.GetName())}, secret)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case err != nil:
		return nil, "", err
	case !metav1.IsControlledBy(secret, tj):
		return nil, "", fmt.Errorf("exists but is not owned by this TrainJob (uid %s); delete it so Tether can issue a token", tj.GetUID())
	}
	token, err := binding.ParseToken(string(secret.Data[names.TokenKey]))
	if err != nil {
		return secret, "", nil
	}
	return secret, token, nil
}

// writeSecret creates the token Secret, or updates it when its token or CA
// bundle differ from what they should be.
func (r *Reconciler) writeSecret(ctx context.Context, tj *unstructured.Unstructured, secret *corev1.Secret, token binding.Token, ca []byte) error {
	if secret == nil {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: binding.TokenSecretName(tj.GetName()), Namespace: tj.GetNamespace(),
				Labels: map[string]string{names.BindLabel: names.BindValue}},
			Type: names.TokenSecretType,
			Data: map[string][]byte{names.TokenKey: []byte(token), names.CABundleKey: ca},
		}
		if err := ctrl.SetControllerReference(tj, secret, r.Scheme); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, secret); err != nil {
			return err
		}
		r.written.WroteSecret(client.ObjectKeyFromObject(tj), secret, r.now())
		return nil
	}
	if string(secret.Data[names.TokenKey]) == string(token) && bytes.Equal(secret.Data[names.CABundleKey], ca) {
		return nil
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[names.TokenKey], secret.Data[names.CABundleKey] = []byte(token), ca
	if err := r.Client.Update(ctx, secret); err != nil {
		return err
	}
	r.written.WroteSecret(client.ObjectKeyFromObject(tj), secret, r.now())
	return nil
}

// secretExists handles a new binding whose token Secret was there already
// (its binding was deleted while the TrainJob lived, or a reconcile raced
// this one): as if it had been read first. Its token, when valid, stays the
// job's (running sidecars hold it): the binding takes its hash back. A
// malformed one is replaced by token, which the binding already holds.
func (r *Reconciler) secretExists(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, token binding.Token, ca []byte) (*tetherv1.WorkerBinding, error) {
	secret, existing, err := r.loadToken(ctx, tj)
	switch {
	case err != nil:
		return wb, err
	case secret == nil:
		return wb, fmt.Errorf("was there a moment ago and is gone; retrying")
	case existing != "":
		// The token just made was never written anywhere: no overlap for it.
		wb.Spec.TokenSHA256, wb.Spec.PreviousToken = existing.Hash(), nil
		if err := r.Client.Update(ctx, wb); err != nil {
			return wb, err
		}
		r.written.Wrote(wb, r.now())
		token = existing
	}
	return wb, r.writeSecret(ctx, tj, secret, token, ca)
}
