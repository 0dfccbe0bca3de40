// Package certs is the integration suite for the self-managed serving
// certificate: cert-controller's rotator issuing the CA and certificate into
// a Secret and patching the webhook configuration's caBundle, on a real
// kube-apiserver.
package certs
