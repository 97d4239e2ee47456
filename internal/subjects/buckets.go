package subjects

// The KV buckets' default names.
const (
	ConfigBucket   = "allot_config"   // templates, namespaces, domains: the operators'
	StateBucket    = "allot_state"    // lease records, verdicts, seals, transfers
	ElectionBucket = "allot_election" // leader elections
)

// FoundedKey is the election-bucket key, beside election key key, that
// records that the key has had a leader: <key>.founded.
func FoundedKey(key string) string { return key + ".founded" }

// ConfigStatusInfix separates the node from the configuration key in a
// verdict's state-bucket key.
const ConfigStatusInfix = ".config."

// ConfigStatusKey is the state-bucket key of node's verdict on
// configuration key: <node>.config.<key> ("root.config.templates.db").
func ConfigStatusKey(node, key string) string { return node + ConfigStatusInfix + key }

// MirrorDurable is the durable consumer of the parent's configuration
// bucket that child's configuration mirror sources through:
// allot_mirror_<child>.
func MirrorDurable(child string) string { return "allot_mirror_" + child }

// MirrorDeliver is the subject that consumer delivers to:
// allot.mirror.<child>.<bucket>.
func MirrorDeliver(child, bucket string) string { return prefix + "mirror." + child + "." + bucket }
