// Package codec is the pod webhook's fast path: the coding of what the
// API server sends and receives, with none of the webhook's decisions.
//
// The plain path is controller-runtime's: webhook.Admission decodes the
// AdmissionReview through its universal deserializer (the review twice),
// mutate.PodHandler.Handle decodes the pod again, and encoding/json encodes
// the patch by reflection. Profiled under load (test/performance/admission),
// that was most of the pod webhook's own CPU per admission. Here the same
// bytes are read and written in fewer passes:
//
//   - PodReviews serves an admission.k8s.io/v1 AdmissionReview, decoding the
//     review and its pod in one pass, and asks the webhook one question, its
//     Admit: what is the answer to this pod's CREATE;
//   - Patched encodes the answer's JSON patch in one pass, and the appended
//     sidecar (Container) from a template learnt from the webhook's own
//     renderer;
//   - PodEncoding keeps the pod's protobuf encoding, which the webhook
//     compares to prove its patch is all it changed, in pooled buffers.
//
// Each writes what the plain path writes, byte for byte: this package's
// tests prove it for the encoders, and pkg/mutate's golden tests for every
// case the webhook decides (served here and through Handle alike).
package codec
