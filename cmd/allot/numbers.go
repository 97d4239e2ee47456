package main

import (
	"math"
	"regexp"
	"strconv"
)

// number formats a capacity for people: six significant digits, and
// never fewer than its whole part, so a lease decayed to
// 499.9999650609383 reads 500 and 1234567.8 reads 1234568.
func number(f float64) string {
	if f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	whole := int(math.Floor(math.Log10(math.Abs(f)))) + 1
	if whole <= 0 {
		return strconv.FormatFloat(f, 'g', 6, 64)
	}
	decimals := max(0, 6-whole)
	p := math.Pow10(decimals)
	return strconv.FormatFloat(math.Round(f*p)/p, 'f', -1, 64)
}

// jsonFraction is one line of indented JSON whose value is a number with
// a fraction; a string value starts with a quote and never matches.
var jsonFraction = regexp.MustCompile(`(?m)^(\s*(?:"[^"\n]*": )?)(-?\d+\.\d+(?:[eE][-+]?\d+)?)(,?)$`)

// roundJSON rewrites the fractional numbers of indented JSON as number
// does, for a reply printed to people.
func roundJSON(indented []byte) []byte {
	return jsonFraction.ReplaceAllFunc(indented, func(line []byte) []byte {
		m := jsonFraction.FindSubmatch(line)
		f, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return line
		}
		return append(append(append([]byte{}, m[1]...), number(f)...), m[3]...)
	})
}
