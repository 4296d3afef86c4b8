// Package benchrun measures Mailroom's throughput, latency and memory
// figures on real processes: the mailroom binary serving a fresh database
// with the sandbox provider, driven over HTTP by this package's benchmarks,
// with webhooks received by a local server. `make bench` runs them and ends
// with one line per figure and its goal; docs/operations.md ("Measuring")
// says what each figure means.
package benchrun
