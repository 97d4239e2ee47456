package wire

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/allot/allot/proto/allotpb"
)

func TestEncodingOf(t *testing.T) {
	tests := []struct {
		h    map[string][]string
		want Encoding
	}{
		{nil, JSON},
		{map[string][]string{}, JSON},
		{map[string][]string{"Content-Type": {}}, JSON},
		{map[string][]string{"content-type": {"application/protobuf"}}, JSON}, // NATS header keys are case-sensitive
		{map[string][]string{"Content-Type": {"application/json"}}, JSON},
		{map[string][]string{"Content-Type": {"application/protobuf"}}, Protobuf},
		{map[string][]string{"Content-Type": {" Application/Protobuf "}}, Protobuf},
		{map[string][]string{"Content-Type": {"application/x-protobuf"}}, Protobuf},
		{map[string][]string{"Content-Type": {"APPLICATION/VND.GOOGLE.PROTOBUF"}}, Protobuf},
		{map[string][]string{"Content-Type": {"application/protobuf; charset=utf-8"}}, JSON},
		{map[string][]string{"Content-Type": {"applicaTion/json"}}, JSON},
	}
	for _, tt := range tests {
		if got := EncodingOf(tt.h); got != tt.want {
			t.Errorf("EncodingOf(%v) = %v, want %v", tt.h, got, tt.want)
		}
	}
}

func TestValidateGetCapacity(t *testing.T) {
	ok := func() *allotpb.GetCapacityRequest {
		return &allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: 1}}}
	}
	tests := []struct {
		name   string
		mutate func(*allotpb.GetCapacityRequest)
		want   string
	}{
		{"valid", func(*allotpb.GetCapacityRequest) {}, ""},
		{"space in id", func(r *allotpb.GetCapacityRequest) { r.ClientId = "a b" }, "space"},
		{"control char", func(r *allotpb.GetCapacityRequest) { r.Resource[0].ResourceId = "a\x01" }, "control"},
		{"bad utf8", func(r *allotpb.GetCapacityRequest) { r.ClientId = "\xff" }, "UTF-8"},
		{"priority", func(r *allotpb.GetCapacityRequest) { r.Resource[0].Priority = 5000 }, "priority"},
		{"has NaN", func(r *allotpb.GetCapacityRequest) { r.Resource[0].Has = &allotpb.Lease{Capacity: math.NaN()} }, "NaN"},
		{"nil resource entry", func(r *allotpb.GetCapacityRequest) { r.Resource[0] = nil }, "resource_id is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok()
			tt.mutate(r)
			err := ValidateGetCapacity(r)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadRequest) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

// TestValidateIDCharacters checks the byte-wise check of ASCII ids
// against the definition: printable, not a space, valid UTF-8.
func TestValidateIDCharacters(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want := utf8.ValidString(s)
		for _, r := range s {
			want = want && !unicode.IsSpace(r) && unicode.IsPrint(r)
		}
		if got := ValidateID("id", s) == nil; got != want {
			t.Errorf("ValidateID(%q) ok = %v, want %v", s, got, want)
		}
	}
	for c := range 256 {
		check("a" + string([]byte{byte(c)}) + "b")
		check(string(rune(c)))
	}
	for _, s := range []string{"é", "a\u00a0b", "a\u2028", "日本", "\u0085", "a\xc3"} {
		check(s)
	}
}

func TestDuplicateResources(t *testing.T) {
	for _, n := range []int{2, 16, 17, 500} {
		r := &allotpb.GetCapacityRequest{ClientId: "c"}
		for i := range n {
			r.Resource = append(r.Resource, &allotpb.ResourceRequest{ResourceId: "r" + strconv.Itoa(i)})
		}
		if err := ValidateGetCapacity(r); err != nil {
			t.Fatalf("n=%d distinct: %v", n, err)
		}
		r.Resource[n-1].ResourceId = r.Resource[n/2-1].ResourceId
		if err := ValidateGetCapacity(r); err == nil || !strings.Contains(err.Error(), "appears twice") {
			t.Fatalf("n=%d duplicate: %v", n, err)
		}
	}
}

func TestReplyEncodingOf(t *testing.T) {
	for _, tt := range []struct {
		h    map[string][]string
		want Encoding
	}{
		{nil, Protobuf},
		{map[string][]string{}, Protobuf},
		{map[string][]string{"Content-Type": {"application/json"}}, JSON},
		{map[string][]string{"Content-Type": {"application/protobuf"}}, Protobuf},
		{map[string][]string{"Content-Type": {"Application/JSON; charset=utf-8"}}, JSON},
		{map[string][]string{"Content-Type": {"text/plain"}}, Protobuf},
	} {
		if got := ReplyEncodingOf(tt.h); got != tt.want {
			t.Errorf("ReplyEncodingOf(%v) = %v, want %v", tt.h, got, tt.want)
		}
	}
}
