//go:build !race

package faults

// raceBuild says the race detector is on (see race_on_test.go).
const raceBuild = false
