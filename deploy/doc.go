// Package deploy holds deployment files (NATS configs, service units,
// manifests) and the example resource templates that `allot up` seeds.
package deploy
