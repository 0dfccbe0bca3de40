// Package trainjob reads Kubeflow Trainer TrainJobs the way Tether needs
// them: as unstructured objects (metadata and status conditions only), so the
// same code works with every Trainer v2 release's TrainJob shape.
package trainjob
