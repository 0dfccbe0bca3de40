package localcluster

// The Secret Trainer v2.0.0's cert rotator keeps (StartTrainerV20), written
// so that the rotator accepts it as is (see trainer_v20.go).

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/framework/certs"
)

// writeTrainerV20Secret creates or replaces the rotator's Secret with
// contents it accepts without rotating (see the top of trainer_v20.go).
func writeTrainerV20Secret(ctx context.Context, cs kubernetes.Interface, callerCA []byte) error {
	ns := trainerV20Namespace
	if b, err := os.ReadFile(trainerV20NSFile); err == nil && strings.TrimSpace(string(b)) != "" {
		ns = strings.TrimSpace(string(b)) // what the manager itself would read
	}
	data, err := trainerV20SecretData(callerCA)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: trainerV20SecretName, Namespace: ns},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	old, err := cs.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	case err == nil:
		old.Data, old.StringData, old.Type = data, nil, corev1.SecretTypeOpaque
		_, err = cs.CoreV1().Secrets(ns).Update(ctx, old, metav1.UpdateOptions{})
	}
	return err
}

func trainerV20SecretData(callerCA []byte) (map[string][]byte, error) {
	now := time.Now()
	ca, err := certs.New(certs.RSA(), certs.CommonName(trainerV20CAName), certs.Organization("tether-local"),
		certs.Hosts(trainerV20CAName), certs.NotAfter(now.Add(10*365*24*time.Hour)))
	if err != nil {
		return nil, err
	}
	dns := fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, trainerV20Namespace)
	if b, err := os.ReadFile(trainerV20NSFile); err == nil && strings.TrimSpace(string(b)) != "" {
		dns = fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, strings.TrimSpace(string(b)))
	}
	leaf, err := ca.NewKeyPair(certs.CommonName(dns), certs.Hosts(dns), certs.ExtKeyUsage(x509.ExtKeyUsageServerAuth),
		certs.NotAfter(now.Add(365*24*time.Hour)))
	if err != nil {
		return nil, err
	}
	bundle := bytes.Clone(ca.CertPEM)
	bundle = append(bundle, bytes.TrimSpace(callerCA)...)
	bundle = append(bundle, '\n')
	return map[string][]byte{
		"ca.crt":  bundle,
		"ca.key":  ca.KeyPEM,
		"tls.crt": leaf.CertPEM,
		"tls.key": leaf.KeyPEM,
	}, nil
}
