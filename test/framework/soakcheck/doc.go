// Package soakcheck is the soak's checker: offline, from what
// was recorded and what the store holds, it checks Tether's promise after a
// run of many jobs under overlapping faults. It never trusts an ETag, a
// status field or the control plane's word: every object is read back and
// hashed and compared with the trainer's own durable record of every
// version it closed (ReadRecord), and the artifact endpoint's access log
// (ParseAccessLog) says which token touched which keys.
//
// The invariants: nothing falsely verified (every file a verified manifest
// lists is in the store as listed, a version the trainer wrote); nothing
// lost (every key a request stored is still there, in a version the trainer
// wrote); a truthful end (every job ended, Succeeded only with every node
// verified); isolation (no request succeeded on another job's keys, no
// unlabeled job was bound); nothing left behind (no pending objects, no
// open multipart upload when the store lists them, and no other leftovers
// the runner found). Report prints a table per invariant and every
// violation with the faults around it.
package soakcheck
