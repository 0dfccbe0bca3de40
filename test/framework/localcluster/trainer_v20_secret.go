package localcluster

// The Secret Trainer v2.0.0's cert rotator keeps (StartTrainerV20), written
// so that the rotator accepts it as is (see trainer_v20.go).

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: trainerV20CAName, Organization: []string{"tether-local"}},
		DNSNames:              []string{trainerV20CAName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	dns := fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, trainerV20Namespace)
	if b, err := os.ReadFile(trainerV20NSFile); err == nil && strings.TrimSpace(string(b)) != "" {
		dns = fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, strings.TrimSpace(string(b)))
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: dns},
		DNSNames:              []string{dns},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	bundle = append(bundle, bytes.TrimSpace(callerCA)...)
	bundle = append(bundle, '\n')
	return map[string][]byte{
		"ca.crt":  bundle,
		"ca.key":  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(caKey)}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
