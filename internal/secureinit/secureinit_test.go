package secureinit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// TestInit: each user's seed file holds a user seed whose public key is
// the environment's; the environment file lists every variable, is
// private, and a second Init in the same directory is refused.
func TestInit(t *testing.T) {
	dir := t.TempDir()
	s, err := Init(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range Users() {
		data, err := os.ReadFile(s.Seed(u))
		if err != nil {
			t.Fatal(err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data))))
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		pub, _ := kp.PublicKey()
		if env := s.Env[strings.ToUpper(u)+"_NKEY"]; env != pub || !nkeys.IsValidPublicUserKey(pub) {
			t.Errorf("%s: env %q, seed's key %q", u, env, pub)
		}
		if st, err := os.Stat(s.Seed(u)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s seed file: %v %v", u, st.Mode(), err)
		}
	}
	// A leaf link authenticates with its seed: the child's variable
	// holds the seed of the root's public key.
	for _, u := range []string{"tenant_a_leaf", "tenant_b_leaf", "region1_leaf"} {
		kp, err := nkeys.FromSeed([]byte(s.Env[strings.ToUpper(u)+"_SEED"]))
		if err != nil {
			t.Fatalf("%s seed: %v", u, err)
		}
		if pub, _ := kp.PublicKey(); pub != s.Env[strings.ToUpper(u)+"_NKEY"] {
			t.Errorf("%s: seed's key %q, env %q", u, pub, s.Env[strings.ToUpper(u)+"_NKEY"])
		}
	}
	// The two coordinators' inboxes differ: the root lets region1's link
	// receive replies on its own prefix only.
	if InboxPrefix("region1_coordinator") == InboxPrefix("coordinator") || InboxPrefix("region1_coordinator") == "" {
		t.Errorf("inbox prefixes: root %q, region1 %q", InboxPrefix("coordinator"), InboxPrefix("region1_coordinator"))
	}
	envFile := filepath.Join(dir, EnvFile)
	data, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s.Env {
		if !strings.Contains(string(data), k+"='"+v+"'\n") {
			t.Errorf("env file lacks %s", k)
		}
	}
	if st, _ := os.Stat(envFile); st.Mode().Perm() != 0o600 {
		t.Errorf("env file mode %v", st.Mode())
	}
	if _, err := Init(dir, time.Hour); err == nil || !strings.Contains(err.Error(), "already holds credentials") {
		t.Errorf("second Init: %v", err)
	}
	if _, err := Init(filepath.Join(t.TempDir(), "it's"), time.Hour); err == nil {
		t.Error("a quote in the directory was accepted")
	}
}
