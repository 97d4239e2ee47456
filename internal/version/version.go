// Package version holds allot's version: the one the services report in
// their NATS micro INFO and the one `allot version` prints.
package version

// Version is allot's version, a semantic version as NATS micro requires.
const Version = "0.1.0"
