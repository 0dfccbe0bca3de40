// Package ownwrites is the binding controller's read-your-writes
// bookkeeping over the manager's cache: the WorkerBindings and token
// Secrets it wrote, until the cache has them; which token Secrets it
// verified lately (a binding waiting for pods does not read its Secret
// again at each recheck); and the work-queue priority of a new binding's
// first status (behind every token still to issue).
package ownwrites
