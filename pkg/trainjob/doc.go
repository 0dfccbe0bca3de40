// Package trainjob owns every fact Tether relies on about Kubeflow Trainer and
// JobSet: the TrainJob's GVK and conditions, the labels JobSet puts on the
// pods it creates, what a trainer pod and the primary node are, and the
// reference Events about a TrainJob point at.
//
// TrainJobs are read as unstructured objects or metadata only (never their
// spec), so the same code works with every Trainer v2 release's shape.
package trainjob
