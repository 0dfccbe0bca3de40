// Package bindingmetrics reports every WorkerBinding's phase, attempt,
// exits, nodes and progress to Prometheus at scrape time, from the cache.
package bindingmetrics
