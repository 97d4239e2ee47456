// Package secure holds the secure NATS configuration of allot (accounts,
// nkey users with permissions, TLS; see docs/security.md) and, in its
// tests, the security suite that starts servers from these very files and
// proves each attack on the deployment is refused.
package secure
