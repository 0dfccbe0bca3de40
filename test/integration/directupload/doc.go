// Package directupload is the integration suite for direct uploads with the
// s3 backend: the control plane (as its ServiceAccount under the shipped
// RBAC) on a real kube-apiserver and etcd, storing into a real versitygw,
// with the sidecar's real clients and presigned URLs used over HTTP on
// loopback; and reads of such an own bucket through the API server's read
// API (an API server that proxies aggregated APIs, on versitygw and
// SeaweedFS).
package directupload
