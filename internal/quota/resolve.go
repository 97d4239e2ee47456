package quota

import "fmt"

// How a bucket was found, as Resolve reports it.
const (
	FoundNamed         = "named"
	FoundDynamic       = "dynamic"
	FoundDefault       = "default"
	FoundGlobalDefault = "global default"
)

// Resolve says which bucket would answer a take for ns:name under c, by
// the lookup order of Table (named, dynamic, namespace default, global
// default), without creating anything: the bucket string Take would
// return, its spec and how it was found. It does not know how many
// dynamic buckets are alive, so it cannot foresee "too_many_buckets".
// For `allot config explain`.
func (c *Config) Resolve(ns, name string) (bucket string, spec *Spec, how string, err error) {
	if sp := c.Namespaces[ns]; sp != nil {
		if s := sp.Buckets[name]; s != nil {
			return ns + ":" + name, s, FoundNamed, nil
		}
		if sp.Dynamic != nil {
			if !ValidName(name) {
				return "", nil, "", fmt.Errorf("%s:%s: name must match [A-Za-z0-9_]+ and be at most %d bytes", clip(ns), clip(name), MaxNameLen)
			}
			return ns + ":" + name, sp.Dynamic, FoundDynamic, nil
		}
		if sp.Default != nil {
			return ns + ":" + DefaultBucketName, sp.Default, FoundDefault, nil
		}
	}
	if g := c.Namespaces[GlobalDefault]; g != nil && g.Default != nil {
		return GlobalDefault + ":" + DefaultBucketName, g.Default, FoundGlobalDefault, nil
	}
	return "", nil, "", fmt.Errorf("%s:%s: %s: no named, dynamic or default bucket in namespace %q and no global default (namespace %q, default_bucket)",
		clip(ns), clip(name), ReasonNoBucket, clip(ns), GlobalDefault)
}
