package domainlimit

import (
	"fmt"
	"maps"
	"slices"
)

// rateNotes says what RateSpec.Normalize changed from before to after.
func rateNotes(path string, before, after RateSpec) []string {
	notes := tierNotes(path+".tiers", before.Tiers, after.Tiers)
	for _, d := range slices.Sorted(maps.Keys(before.Domains)) {
		notes = append(notes, tierNotes(path+".domains."+d+".tiers", before.Domains[d], after.Domains[d])...)
	}
	return notes
}

func tierNotes(path string, before, after []Tier) []string {
	var notes []string
	j := 0
	for i, t := range before {
		at := fmt.Sprintf("%s[%d]", path, i)
		if t.Active == 0 {
			notes = append(notes, at+": dropped: with an active time of 0s it can never be entered")
			continue
		}
		a := after[j]
		j++
		if a.Window != t.Window {
			notes = append(notes, fmt.Sprintf("%s.window: %s shortened to the active time %s", at, t.Window, a.Window))
		}
		if a.Active != t.Active {
			notes = append(notes, fmt.Sprintf("%s.active: %s trimmed to %s, a whole number of %s windows", at, t.Active, a.Active, a.Window))
		}
	}
	return notes
}

// copyNotes says which limits CopySpec.Normalize lowered to the global
// limit.
func copyNotes(path string, before, after CopySpec) []string {
	var notes []string
	lowered := func(field string, was, is int64) {
		if was != is && was != Unlimited { // unset is "no more than the global limit"
			notes = append(notes, fmt.Sprintf("%s.%s: %d lowered to the global limit %d", path, field, was, is))
		}
	}
	lowered("domain_limit", before.DomainLimit, after.DomainLimit)
	for _, d := range slices.Sorted(maps.Keys(before.Domains)) {
		lowered("domains."+d+".domain_limit", before.Domains[d], after.Domains[d])
	}
	for i, g := range before.Groups {
		lowered(fmt.Sprintf("groups[%d].limit", i), g.Limit, after.Groups[i].Limit)
	}
	return notes
}
