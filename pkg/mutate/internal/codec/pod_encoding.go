package codec

import (
	"bytes"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// PodEncoding is a pod's protobuf encoding (deterministic: map keys sorted),
// in a buffer from podEncodings: a pod's worth of garbage per admission,
// twice (before and after the injection), otherwise. Release gives it back.
type PodEncoding struct {
	buf []byte
}

// podEncodings recycles the buffers of PodEncoding.
var podEncodings = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledPodEncoding bounds what the pool keeps: a rare huge pod's
// buffer is left to the GC.
const maxPooledPodEncoding = 256 << 10

// EncodePod is pod.Marshal() into a pooled buffer.
func EncodePod(pod *corev1.Pod) (PodEncoding, error) {
	size := pod.Size()
	buf := *podEncodings.Get().(*[]byte)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	n, err := pod.MarshalToSizedBuffer(buf[:size])
	if err != nil {
		release(buf)
		return PodEncoding{}, err
	}
	return PodEncoding{buf: buf[size-n : size]}, nil
}

// Encodes reports whether pod encodes to e. Sizes that differ need no
// encoding to tell.
func (e PodEncoding) Encodes(pod *corev1.Pod) (bool, error) {
	if pod.Size() != len(e.buf) {
		return false, nil
	}
	other, err := EncodePod(pod)
	if err != nil {
		return false, err
	}
	defer other.Release()
	return bytes.Equal(e.buf, other.buf), nil
}

// Release gives e's buffer back to the pool; e is empty after.
func (e *PodEncoding) Release() {
	release(e.buf)
	e.buf = nil
}

func release(buf []byte) {
	if buf == nil || cap(buf) > maxPooledPodEncoding {
		return
	}
	buf = buf[:0]
	podEncodings.Put(&buf)
}
