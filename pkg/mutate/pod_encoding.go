package mutate

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// podEncodings recycles the buffers of the injection proof's two protobuf
// encodings of the pod (podSnapshot, injectionPatch): a pod's worth of
// garbage each, per admission, otherwise.
var podEncodings = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledPodEncoding bounds what the pool keeps: a rare huge pod's
// buffer is left to the GC.
const maxPooledPodEncoding = 256 << 10

// encodePod is pod.Marshal() into a buffer from podEncodings; give it back
// with releasePodEncoding once nothing reads it.
func encodePod(pod *corev1.Pod) ([]byte, error) {
	size := pod.Size()
	buf := *podEncodings.Get().(*[]byte)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	n, err := pod.MarshalToSizedBuffer(buf[:size])
	if err != nil {
		releasePodEncoding(buf)
		return nil, err
	}
	return buf[size-n : size], nil
}

func releasePodEncoding(buf []byte) {
	if buf == nil || cap(buf) > maxPooledPodEncoding {
		return
	}
	buf = buf[:0]
	podEncodings.Put(&buf)
}

// release gives the snapshot's encoding back to podEncodings; s is not used
// after.
func (s *podSnapshot) release() {
	releasePodEncoding(s.encoded)
	s.encoded = nil
}
