// Package kubernetes holds the manifests that run fulcrumd on a fleet of Jetson nodes
// (namespace.yaml, configmap.yaml, daemonset.yaml, kustomization.yaml, Dockerfile; see
// README.md) and the test that parses and cross-checks them. It has no Go API.
package kubernetes
