// Package storetest holds what the artifact store's test suites share: the
// upload.Backend contract suite both backends run, real S3 servers on
// loopback (started once per test binary, stopped by Main), and test data.
// Only tests import it.
package storetest
