// Package storeops is what the controllers ask of the artifact store, said
// once: the wiring hands every controller the store's one owner
// (pkg/artifactstore/store), and each controller names only the part it
// uses, so its tests can stand in for the store.
package storeops
