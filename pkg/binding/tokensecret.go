package binding

// TokenSecretName is the token Secret of TrainJob trainJob (same namespace).
func TokenSecretName(trainJob string) string { return trainJob + "-tether-token" }
