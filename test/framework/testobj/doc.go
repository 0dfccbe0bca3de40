// Package testobj holds fluent builders for the objects Tether's tests use,
// in the style of Kueue's test utilities:
//
//	MakeTrainJob("tj", "ns").Bound().NumNodes(2).Obj()
//	MakeTrainerPod("tj", "ns").CompletionIndex(1).Obj()
package testobj
