//go:build race

package faults

// raceBuild says the race detector is on: the processes run several
// times slower, so a load that floods a plain build floods a race build
// at a fraction of the rate.
const raceBuild = true
