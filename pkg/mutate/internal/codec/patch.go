package codec

import (
	"sync"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// encodePatch is json.Marshal(ops), byte for byte, written in one pass.
// Not through JsonPatchOperation.MarshalJSON: encoding/json re-scans and
// compacts whatever a MarshalJSON returns, which cost each operation's value
// a second pass, more than half of the pod webhook's own CPU per admission
// (pkg/mutate's BenchmarkPodReview). appended, when not nil, is the
// container ops add to the init containers: its JSON comes from its
// template (container.go).
func encodePatch(ops []jsonpatch.JsonPatchOperation, appended *Container) ([]byte, error) {
	if ops == nil {
		return []byte("null"), nil
	}
	buf := append(patchBuffer(), '[')
	var err error
	for k, op := range ops {
		if k > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"op":`...)
		buf = appendJSONString(buf, op.Operation)
		buf = append(buf, `,"path":`...)
		buf = appendJSONString(buf, op.Path)
		switch {
		case op.Value == nil && (op.Operation == "add" || op.Operation == "replace"):
			// As MarshalJSON writes it: omitting the value would make another operation.
			buf = append(buf, `,"value":null`...)
		case op.Value == nil:
		default:
			buf = append(buf, `,"value":`...)
			if buf, err = appendPatchValue(buf, op, appended); err != nil {
				return nil, err
			}
		}
		buf = append(buf, '}')
	}
	return append(buf, ']'), nil
}

// appendPatchValue appends json.Marshal(op.Value).
func appendPatchValue(dst []byte, op jsonpatch.JsonPatchOperation, appended *Container) ([]byte, error) {
	switch v := op.Value.(type) {
	case string:
		return appendJSONString(dst, v), nil
	case corev1.Container:
		// One init container appended after the pod's own: only the
		// appended one is of its name (the webhook denies a pod with
		// another, and passes no appended container when it completes a
		// declared one in place).
		if appended != nil && op.Operation == "add" && op.Path == "/spec/initContainers/-" && v.Name == appended.Name {
			return appended.appendJSON(dst)
		}
	case []corev1.Container:
		// The init containers of a pod that had none: the appended one alone.
		if appended != nil && op.Operation == "add" && op.Path == "/spec/initContainers" && len(v) == 1 && v[0].Name == appended.Name {
			dst, err := appended.appendJSON(append(dst, '['))
			return append(dst, ']'), err
		}
	}
	return appendMarshal(dst, op.Value)
}

// patchBuffers recycles the patch buffers of ServePodReview, which gives
// each back once the review with the patch is written (releasePatch).
var patchBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledPatch bounds the patch buffers kept.
const maxPooledPatch = 64 << 10

func patchBuffer() []byte {
	buf := *patchBuffers.Get().(*[]byte)
	if buf == nil {
		buf = make([]byte, 0, 4096)
	}
	return buf[:0]
}

// releasePatch gives an encoded patch's buffer back to patchBuffers; nothing
// may read it after.
func releasePatch(patch []byte) {
	if cap(patch) == 0 || cap(patch) > maxPooledPatch {
		return
	}
	patch = patch[:0]
	patchBuffers.Put(&patch)
}

// Patched allows with the encoded JSON patch ops, as admission.Patched and
// Response.Complete would, without the second pass. appended, when not nil,
// is the container ops append to the init containers, which is encoded
// from its template.
func Patched(ops []jsonpatch.JsonPatchOperation, appended *Container) (admission.Response, error) {
	resp := admission.Allowed("")
	if len(ops) == 0 {
		return resp, nil
	}
	patch, err := encodePatch(ops, appended)
	if err != nil {
		return admission.Response{}, err
	}
	patchType := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &patchType
	return resp, nil
}
