package subjects

import "testing"

func TestValidateNode(t *testing.T) {
	for name, ok := range map[string]bool{"root": true, "eu-west_1": true, "T": true, "tt": true, "t": false, "": false,
		"a.b": false, "a*": false, "é": false, string(make([]byte, 65)): false} {
		if err := ValidateNode(name); (err == nil) != ok {
			t.Errorf("ValidateNode(%q) = %v", name, err)
		}
	}
}
