package lifecycle

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metav1Time is t at the API's resolution (seconds), so that a value read
// back compares equal to the one written.
func metav1Time(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }
