package config

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func tg(name, glob string) *Template { return &Template{Name: name, Glob: glob} }

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, id string
		want        bool
	}{
		{"*", "", true},
		{"*", "anything/at/all", true},
		{"mysql/*", "mysql/main", true},
		{"mysql/*", "mysql/", true},
		{"mysql/*", "mysql", false},
		{"mysql/*", "pg/main", false},
		{"*/main", "mysql/main", true},
		{"*/main", "mysql/mainx", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "aéc", true}, // ? is one rune
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"exact", "exact", true},
		{"exact", "exac", false},
		{"*a*a*a*a*a*b", strings.Repeat("a", 200), false},
	}
	for _, tt := range tests {
		if got := GlobMatch(tt.pattern, tt.id); got != tt.want {
			t.Errorf("GlobMatch(%q, %q) = %v, want %v", tt.pattern, tt.id, got, tt.want)
		}
	}
}

func TestMatchPrecedence(t *testing.T) {
	fallback := tg("builtin:default", "*")
	templates := []*Template{
		tg("default", "*"),
		tg("mysql-any", "mysql/*"),
		tg("mysql-main", "mysql/main"),
		tg("mysql-main-dup", "mysql/main"), // same exact glob: smaller name wins
		tg("mysql-replica", "mysql/replica-*"),
		tg("mysql-replica-q", "mysql/replica-?"),
		tg("any-main", "*/main"),
		tg("two-stars", "m*/r*"),
		tg("pg-b", "pg/*"),
		tg("pg-a", "pg/*"), // same glob: smaller name wins
	}
	tests := []struct {
		id, want string
	}{
		{"mysql/main", "mysql-main"},           // exact beats every glob
		{"mysql/replica-1", "mysql-replica-q"}, // "?" keeps more literal characters than "*"
		{"mysql/replica-12", "mysql-replica"},
		{"mysql/other", "mysql-any"},
		{"pg/main", "any-main"},    // "*/main" has 5 literal characters, "pg/*" 3
		{"pg/x", "pg-a"},           // same glob twice: the smaller name wins
		{"redis/main", "any-main"}, // only "*/main" and "*"
		{"mx/ry", "two-stars"},
		{"unknown", "default"}, // stored "*" beats the fallback
	}
	s := NewSet(1, templates, fallback)
	for _, tt := range tests {
		if got := s.Match(tt.id); got == nil || got.Name != tt.want {
			t.Errorf("Match(%q) = %v, want %s", tt.id, got, tt.want)
		}
	}
	// Without a stored "*", the fallback applies; without a fallback, nil.
	s2 := NewSet(1, templates[1:], fallback)
	if got := s2.Match("unknown"); got != fallback {
		t.Errorf("Match(unknown) = %v, want fallback", got)
	}
	if got := NewSet(1, templates[1:], nil).Match("unknown"); got != nil {
		t.Errorf("Match(unknown) with reject policy = %v, want nil", got)
	}
}

func TestPrecedesIsStrictOrder(t *testing.T) {
	ts := []*Template{tg("a", "*"), tg("b", "x*"), tg("c", "?*"), tg("d", "x?"), tg("e", "x?"), tg("d", "x?"), tg("f", "**")}
	ts[5].Revision = 9
	for _, a := range ts {
		if Precedes(a, a) {
			t.Errorf("Precedes(%v, itself)", a)
		}
		for _, b := range ts {
			if a != b && Precedes(a, b) == Precedes(b, a) {
				t.Errorf("Precedes not total/antisymmetric on %+v, %+v", a, b)
			}
		}
	}
}

// TestMatchIndependentOfOrder checks that the order templates are given
// in (the order they happened to be written) never changes Match.
func TestMatchIndependentOfOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "/", "*", "?"}
	randGlob := func() string {
		var b strings.Builder
		for n := 1 + rng.IntN(5); n > 0; n-- {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	randID := func() string {
		var b strings.Builder
		for n := rng.IntN(6); n > 0; n-- {
			b.WriteString(alphabet[rng.IntN(3)])
		}
		return b.String()
	}
	for round := 0; round < 200; round++ {
		var ts []*Template
		for i := rng.IntN(12); i >= 0; i-- {
			// Names are unique, like the keys they come from; globs
			// collide often (short globs over a small alphabet).
			ts = append(ts, &Template{Name: fmt.Sprintf("t%d", i), Glob: randGlob(), Revision: uint64(rng.IntN(3))})
		}
		ids := make([]string, 30)
		for i := range ids {
			ids[i] = randID()
		}
		ref := NewSet(1, ts, nil)
		for shuffle := 0; shuffle < 10; shuffle++ {
			sh := append([]*Template(nil), ts...)
			rng.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
			s := NewSet(1, sh, nil)
			for _, id := range ids {
				if a, b := ref.Match(id), s.Match(id); a != b {
					t.Fatalf("round %d: Match(%q) = %+v in one order, %+v in another (templates %+v)", round, id, a, b, ts)
				}
			}
			a, b := ref.Templates(), s.Templates()
			if len(a) != len(b) {
				t.Fatalf("Templates lengths differ")
			}
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("Templates order differs at %d", i)
				}
			}
		}
	}
}

func TestExplain(t *testing.T) {
	fallback := DefaultTemplate()
	s := NewSet(1, []*Template{tg("default", "*"), tg("mysql-any", "mysql/*"), tg("mysql-main", "mysql/main"), tg("pg", "pg/*")}, fallback)
	cands := s.Explain("mysql/main")
	var names []string
	for _, c := range cands {
		names = append(names, c.Template.Name)
	}
	if got, want := strings.Join(names, ","), "mysql-main,mysql-any,default,builtin:default"; got != want {
		t.Errorf("Explain order = %s, want %s", got, want)
	}
	if !cands[0].Chosen || cands[1].Chosen {
		t.Errorf("Chosen flags wrong: %+v", cands)
	}
	if !strings.Contains(cands[0].Reason, "exact") || !strings.Contains(cands[1].Reason, "6 literal") {
		t.Errorf("reasons: %q / %q", cands[0].Reason, cands[1].Reason)
	}
	if got := NewSet(1, nil, nil).Explain("x"); len(got) != 0 {
		t.Errorf("Explain on empty set = %+v", got)
	}
}
