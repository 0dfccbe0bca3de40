// Package jobconfig is the vocabulary a platform team uses on a TrainJob: the
// bind label, the identity annotations Tether stamps, and the per-job settings
// annotations, with their defaults and validation.
//
// Both webhooks and the controller read settings only through Parse, so a value
// that passed the TrainJob webhook means the same thing everywhere.
package jobconfig
