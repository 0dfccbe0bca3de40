package binding

// ProgressFile is the optional file, relative to the artifact directory, where
// a trainer can append one JSON object per line ({"step":100,"epoch":1.5,
// "loss":0.23}); the sidecar reports the last complete line in heartbeats.
const ProgressFile = "tether-progress.jsonl"
