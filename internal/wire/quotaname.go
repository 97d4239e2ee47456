package wire

import (
	"strings"

	"github.com/allot/allot/internal/quota"
)

// MaxQuotaNameLen bounds a quota namespace or bucket name, each part of
// "namespace:name" on its own: the decision core's quota.MaxNameLen.
const MaxQuotaNameLen = quota.MaxNameLen

// ValidateQuotaName checks a quota namespace or bucket name (what says
// which, for the error) with quota.ValidName: 1 to MaxQuotaNameLen
// characters from [A-Za-z0-9_], case-sensitive, as in quotaservice.
// Errors wrap ErrBadRequest and say what is wrong.
func ValidateQuotaName(what, name string) error {
	if quota.ValidName(name) {
		return nil
	}
	// Say what is wrong; quota.ValidName is the rule.
	if name == "" {
		return badf("%s is empty", what)
	}
	if len(name) > MaxQuotaNameLen {
		return badf("%s is %d characters long; the limit is %d", what, len(name), MaxQuotaNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return badf("%s %q contains %q; use only letters, digits and '_'", what, clip(name), string(rune(c)))
		}
	}
	return badf("%s %q is invalid", what, clip(name))
}

// SplitBucket splits "namespace:name" into its parts and checks both
// with ValidateQuotaName. Errors wrap ErrBadRequest.
func SplitBucket(bucket string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(bucket, ":")
	if !ok {
		if bucket == "" {
			return "", "", badf("bucket is empty: write \"namespace:name\"")
		}
		return "", "", badf("bucket %q is not of the form \"namespace:name\"", clip(bucket))
	}
	if err := ValidateQuotaName("bucket namespace", namespace); err != nil {
		return "", "", err
	}
	if err := ValidateQuotaName("bucket name", name); err != nil {
		return "", "", err
	}
	return namespace, name, nil
}

// clip shortens s for an error message, so a huge bad input does not
// become a huge error.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
