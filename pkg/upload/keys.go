package upload

// PendingDir is where, under a job's prefix, the server keeps a PUT that
// would replace an existing object until the binding's outcome is known:
// <job-id>/.tether/pending/<path>.
const PendingDir = ReservedDir + "/pending/"

// MaxKeyLength is the longest key a client may PUT (bytes). S3 limits keys to
// 1024 bytes; a key must still fit when it is stored as pending, so the limit
// is 1024 minus len(PendingDir) = 1008.
const MaxKeyLength = 1024 - len(PendingDir)
