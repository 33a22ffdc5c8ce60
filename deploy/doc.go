// Package deploy holds no code: its tests check what is deployed, the
// Kubernetes manifests under k8s/ and the Grafana dashboard under grafana/,
// against the services' configuration (see docs/deploying.md).
package deploy
