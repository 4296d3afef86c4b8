// Package deployments holds the production topology: the Dockerfile, a
// compose file with a three-node KurrentDB cluster, PostgreSQL, API and
// worker instances, Kubernetes manifests and an example environment file.
// Its only Go code is a test that keeps those files parseable and in step
// with the Makefile and the configuration.
package deployments
