package upload

import "fmt"

// LogKey is where a pod's trainer log is archived (the instance that never
// restarted, or the first): <job-id>/.tether/logs/<pod>.log. The controller
// writes it, status.artifacts.logs lists it, and orchestrators read it.
func LogKey(jobID, pod string) string { return jobID + "/" + LogsDir + pod + ".log" }

// RestartLogKey is where the log of the trainer instance after restart
// restarts in place is archived (restart 0 is LogKey's).
func RestartLogKey(jobID, pod string, restart int32) string {
	if restart <= 0 {
		return LogKey(jobID, pod)
	}
	return fmt.Sprintf("%s/%s%s.restart-%d.log", jobID, LogsDir, pod, restart)
}
