package jobconfig

import "github.com/tether-dev/tether/api/names"

// Old names, kept while the controller packages move; removed right after.
const (
	BindLabel               = names.BindLabel
	BindValue               = names.BindValue
	JobIDAnnotation         = names.JobIDAnnotation
	WorkerIDAnnotation      = names.WorkerIDAnnotation
	TrainerStatusAnnotation = names.TrainerStatusAnnotation
)
